"""What the scheduler half tells the worker half each step, and the kv_transfer_params that
travel prefill -> router -> decode.

Params a prefill returns for a finished request (NixlConnector's names where it has them, so
vLLM's disagg proxies forward them unchanged):
    do_remote_prefill=True, do_remote_decode=False, remote_engine_id, remote_request_id,
    remote_block_ids, remote_host, remote_port, remote_num_tokens, tp_size,
    kv_lease_seconds      the prefill's lease: decode paces its heartbeats from it
    memwire_sideband      where the grant is published (http://host:port or nats://...)
    memwire_grant         the name it is published under
"""

import hashlib
from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

from .config import safe_name

#: Tags of the reads a decode makes under a grant; the prefill acts on them (the owner's own
#: word of which request's grant admitted each one, never the tag's text alone).
TAG_DONE = "memwire-vllm/done"  # the request's blocks: the grant ends once it is through
TAG_HEARTBEAT = "memwire-vllm/heartbeat"  # one byte: renews the lease
TAG_RELEASE = "memwire-vllm/release"  # one byte: decode needs no blocks (aborted, local hit)

REQUIRED = ("remote_engine_id", "remote_request_id", "remote_block_ids", "memwire_sideband",
            "memwire_grant")


def grant_name(engine_id, request_id):
    """The name a request's grant is published under: the engine's and a digest of the id
    (request ids may hold any character)."""
    digest = hashlib.sha256(str(request_id).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"vllm-{safe_name(engine_id)}-{digest}"


def remote_of(params):
    """The params of a request decode loads from a prefill, or None when they are not ours."""
    if not params or not params.get("do_remote_prefill"):
        return None
    if not all(params.get(key) is not None for key in REQUIRED):
        return None
    return params


@dataclass
class LoadSpec:
    """Decode: read these remote blocks into these local ones under the named grant."""

    local_block_ids: list
    remote_block_ids: list
    sideband: str
    grant: str
    lease: float


@dataclass
class NoticeSpec:
    """Decode: a heartbeat or a release for a prefill's grant."""

    sideband: str
    grant: str
    tag: str


@dataclass
class MemwireConnectorMetadata(KVConnectorMetadata):
    # decode: request id -> LoadSpec
    loads: dict = field(default_factory=dict)
    # decode: heartbeats and releases to send this step
    notices: list = field(default_factory=list)
    # prefill: request id -> (block ids, grant name) to hold under a grant until decode read them
    sends: dict = field(default_factory=dict)
