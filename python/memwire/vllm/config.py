"""What MemwireConnector reads from vLLM's kv_transfer_config, checked once, in one place."""

import os
import re
from dataclasses import dataclass

from ..errors import InvalidArgumentError

#: kv_connector_extra_config keys (NixlConnector's names where it has one).
LEASE_KEY = "kv_lease_duration"  # seconds a prefill holds a request's blocks for its decode
LEASE_MAX_KEY = "kv_lease_max"  # how far decode's heartbeats may carry the lease
LOAD_TIMEOUT_KEY = "kv_load_timeout"  # decode: the bound on one request's load
HOST_KEY = "side_channel_host"
PORT_KEY = "side_channel_port"
NATS_KEY = "nats_url"  # a fleet: grants by name over NATS instead of the embedded endpoint
MODE_KEY = "transfer_mode"  # "pull" (decode reads a finished prefill's blocks) or "push"

DEFAULT_PORT = 5700


def _seconds(extra, key, default):
    value = extra.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
        raise InvalidArgumentError(f"kv_connector_extra_config[{key!r}] is seconds in (0, 86400], not {value!r}")
    return float(value)


@dataclass(frozen=True)
class ConnectorConfig:
    engine_id: str
    lease: float
    lease_max: float
    load_timeout: float
    host: str
    port: int
    nats_url: str
    push: bool = False  # push mode: a decode grants its blocks and serves the sideband too

    @property
    def sideband_url(self):
        """Where this engine's grants are published, as its peers reach it."""
        return self.nats_url or f"http://{self.host}:{self.port}"

    @classmethod
    def from_vllm(cls, vllm_config):
        transfer = vllm_config.kv_transfer_config
        extra = dict(transfer.kv_connector_extra_config or {})
        lease = _seconds(extra, LEASE_KEY, 30)
        lease_max = _seconds(extra, LEASE_MAX_KEY, max(lease, 10 * lease))
        if lease_max < lease:
            raise InvalidArgumentError(f"{LEASE_MAX_KEY} ({lease_max}) is below {LEASE_KEY} ({lease})")
        host = extra.get(HOST_KEY, os.environ.get("MEMWIRE_VLLM_SIDE_CHANNEL_HOST", "127.0.0.1"))
        port = extra.get(PORT_KEY, os.environ.get("MEMWIRE_VLLM_SIDE_CHANNEL_PORT", DEFAULT_PORT))
        try:
            port = int(port) + int(vllm_config.parallel_config.data_parallel_index or 0)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{PORT_KEY} is a port number, not {port!r}") from None
        if not 0 < port < 65536:
            raise InvalidArgumentError(f"{PORT_KEY} {port} is not a port")
        nats_url = extra.get(NATS_KEY, "") or ""
        if not isinstance(host, str) or not host or not isinstance(nats_url, str):
            raise InvalidArgumentError(f"{HOST_KEY} and {NATS_KEY} are strings")
        mode = extra.get(MODE_KEY, "pull")
        if mode not in ("pull", "push"):
            raise InvalidArgumentError(f"kv_connector_extra_config[{MODE_KEY!r}] is 'pull' or 'push', not {mode!r}")
        return cls(
            push=mode == "push",
            engine_id=safe_name(transfer.engine_id or "engine"),
            lease=lease,
            lease_max=lease_max,
            load_timeout=_seconds(extra, LOAD_TIMEOUT_KEY, lease),
            host=host,
            port=port,
            nats_url=nats_url,
        )


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_name(text):
    """A name part both sidebands take (URL path segment, NATS subject token)."""
    return _UNSAFE.sub("_", str(text))[:64] or "_"
