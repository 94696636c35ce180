"""What the scheduler half tells the worker half each step, and the kv_transfer_params that
travel prefill -> router -> decode.

Params a prefill returns for a finished request (NixlConnector's names where it has them, so
vLLM's disagg proxies forward them unchanged):
    do_remote_prefill=True, do_remote_decode=False, remote_engine_id, remote_request_id,
    remote_block_ids, remote_host, remote_port, remote_num_tokens, tp_size,
    kv_lease_seconds      the prefill's lease: decode paces its heartbeats from it
    memwire_sideband      where the grant is published (http://host:port or nats://...)
    memwire_grant         the name it is published under

Push mode (layers streamed as computed; the router sends a request to both engines at once):
    decode's request:  do_remote_prefill=True, memwire_push=NAME
    prefill's request: do_remote_decode=True, memwire_push=NAME, memwire_push_to=DECODE_SIDEBAND
Decode grants the request's blocks to the prefill (writable, under a lease of its load bound)
and publishes the grant under NAME and the blocks' order under NAME + ORDER_SUFFIX; the prefill
writes each layer into them as soon as that layer is computed (a memwire layer stream, tagged
per layer); decode's load is done when every layer's tag arrived, and its grant ends then (or
at its bound, or on abort): nothing the prefill sends later lands.
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


#: Where decode publishes the order of its granted blocks beside the grant (a grant's runs are
#: sorted: they say which blocks, not which holds which token).
ORDER_SUFFIX = "-order"


def push_name(text):
    """The name of a push request's grant, from what the router chose (any text)."""
    digest = hashlib.sha256(str(text).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"vllm-push-{digest}"


def push_of(params):
    """Decode: the params of a request whose prefill pushes its layers here, or None."""
    if not params or not params.get("do_remote_prefill") or params.get("memwire_grant") is not None:
        return None
    return params if isinstance(params.get("memwire_push"), str) and params["memwire_push"] else None


def push_target_of(params):
    """Prefill: the params of a request whose layers it pushes to a decode, or None."""
    if not params or not params.get("do_remote_decode"):
        return None
    ok = all(isinstance(params.get(key), str) and params[key] for key in ("memwire_push", "memwire_push_to"))
    return params if ok else None


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
class PushSend:
    """Prefill: this step completes the request's prompt; stream each layer's blocks (the
    prompt's, in order) into the decode's grant as the layer is computed."""

    block_ids: list
    sideband: str
    name: str


@dataclass
class PushLoad:
    """Decode: grant these blocks (the request's, in order, the last ``len(local_block_ids)``
    of its ``prompt_blocks``) to the request's prefill and wait for every layer."""

    local_block_ids: list
    name: str
    prompt_blocks: int


@dataclass
class MemwireConnectorMetadata(KVConnectorMetadata):
    # decode: request id -> LoadSpec
    loads: dict = field(default_factory=dict)
    # decode: heartbeats and releases to send this step
    notices: list = field(default_factory=list)
    # prefill: request id -> (block ids, grant name) to hold under a grant until decode read them
    sends: dict = field(default_factory=dict)
    # push, prefill: request id -> PushSend, streamed during this step's forward
    push_sends: dict = field(default_factory=dict)
    # push, prefill: requests that finished: report them sent once their layers are in
    push_finished: list = field(default_factory=list)
    # push, decode: request id -> PushLoad
    push_loads: dict = field(default_factory=dict)
    # push, decode: requests aborted while their layers were coming: end their grants, then
    # report them (their blocks' free waits for that)
    push_cancels: list = field(default_factory=list)
