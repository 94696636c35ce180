"""The scheduler half: decides what moves (matched tokens, blocks after allocation, delayed
frees, the params for the router), never touches memory."""

import time

from vllm.v1.request import RequestStatus

from .metadata import (TAG_HEARTBEAT, TAG_RELEASE, LoadSpec, MemwireConnectorMetadata, NoticeSpec,
                       grant_name, remote_of)

_FINISHED_NORMALLY = (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED)


class SchedulerHalf:
    def __init__(self, config, block_size):
        self.config = config
        self.block_size = block_size
        self._loads = {}  # request id -> LoadSpec, for the next metadata
        self._notices = []  # NoticeSpec, for the next metadata
        self._sends = {}  # request id -> (block ids, grant name)
        # Decode: requests whose prefill holds blocks for them, until their load finished:
        # request id -> [params, next heartbeat time].
        self._leased = {}

    # --- decode: loading a prefill's blocks ---

    def on_new_request(self, request):
        params = remote_of(request.kv_transfer_params)
        if params is not None:
            self._leased[request.request_id] = [params, time.monotonic() + _beat(params)]

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = remote_of(request.kv_transfer_params)
        if params is None:
            return 0, False
        available = len(request.prompt_token_ids or ())
        if params.get("remote_num_tokens"):
            available = min(available, int(params["remote_num_tokens"]))
        count = available - num_computed_tokens
        return (count, True) if count > 0 else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        params = remote_of(request.kv_transfer_params)
        if params is None:
            return
        if num_external_tokens > 0:
            local = list(blocks.get_unhashed_block_ids())
            remote = list(params["remote_block_ids"])
            if len(local) > len(remote):
                local = local[len(local) - len(remote):]
            # Blocks decode holds already (a local prefix hit) are not read again.
            remote = remote[len(remote) - len(local):]
            self._loads[request.request_id] = LoadSpec(
                local, remote, params["memwire_sideband"], params["memwire_grant"], _lease(params))
        else:  # every block hit locally: the prefill may free its copy now
            self._notice(params, TAG_RELEASE)
            self._leased.pop(request.request_id, None)
        params["do_remote_prefill"] = False  # one load per request

    def update_connector_output(self, connector_output):
        for request_id in connector_output.finished_recving or ():
            self._leased.pop(request_id, None)

    # --- prefill: holding blocks for a decode ---

    def request_finished(self, request, block_ids):
        params = request.kv_transfer_params or {}
        self._leased.pop(request.request_id, None)
        if params.get("do_remote_prefill") and remote_of(params) is not None:
            # Decode side, aborted before its blocks were allocated: the prefill frees now.
            self._notice(params, TAG_RELEASE)
            params["do_remote_prefill"] = False
            return False, None
        if not params.get("do_remote_decode"):
            return False, None
        if request.status not in _FINISHED_NORMALLY or not block_ids:
            return False, None  # aborted: nothing to hand over, free now
        name = grant_name(self.config.engine_id, request.request_id)
        self._sends[request.request_id] = (list(block_ids), name)
        return True, dict(
            do_remote_prefill=True,
            do_remote_decode=False,
            remote_engine_id=self.config.engine_id,
            remote_request_id=request.request_id,
            remote_block_ids=list(block_ids),
            remote_host=self.config.host,
            remote_port=self.config.port,
            remote_num_tokens=request.num_computed_tokens,
            tp_size=1,
            kv_lease_seconds=self.config.lease,
            memwire_sideband=self.config.sideband_url,
            memwire_grant=name,
        )

    # --- every step ---

    def build_connector_meta(self, scheduler_output):
        now = time.monotonic()
        for request_id, entry in self._leased.items():
            params, due = entry
            if now >= due and request_id not in self._loads:
                self._notice(params, TAG_HEARTBEAT)
                entry[1] = now + _beat(params)
        meta = MemwireConnectorMetadata(loads=self._loads, notices=self._notices, sends=self._sends)
        self._loads, self._notices, self._sends = {}, [], {}
        return meta

    def _notice(self, params, tag):
        self._notices.append(NoticeSpec(params["memwire_sideband"], params["memwire_grant"], tag))


def _lease(params):
    try:
        lease = float(params.get("kv_lease_seconds") or 30)
    except (TypeError, ValueError):
        lease = 30.0
    return min(max(lease, 0.1), 86400.0)


def _beat(params):
    """Heartbeats come at a third of the prefill's lease (its own, from the params, never this
    engine's config): two may be lost before it runs out."""
    return _lease(params) / 3
