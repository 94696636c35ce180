"""The scheduler half: decides what moves (matched tokens, blocks after allocation, delayed
frees, the params for the router), never touches memory."""

import time

from vllm.v1.request import RequestStatus

from .metadata import (TAG_HEARTBEAT, TAG_RELEASE, LoadSpec, MemwireConnectorMetadata, NoticeSpec,
                       PushLoad, PushSend, grant_name, push_name, push_of, push_target_of, remote_of)

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
        # Push, prefill: request id -> [params, its block ids so far, streamed yet?]
        self._pushing = {}
        self._push_sends, self._push_finished = {}, []
        # Push, decode: requests whose layers are coming, until their load finished
        self._push_loading = set()
        self._push_loads, self._push_cancels = {}, []

    # --- decode: loading a prefill's blocks ---

    def on_new_request(self, request):
        if push_target_of(request.kv_transfer_params) is not None:
            self._pushing[request.request_id] = [request, [], False]
        params = remote_of(request.kv_transfer_params)
        if params is not None:
            self._leased[request.request_id] = [params, time.monotonic() + _beat(params)]

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = remote_of(request.kv_transfer_params) or push_of(request.kv_transfer_params)
        if params is None:
            return 0, False
        available = len(request.prompt_token_ids or ())
        if params.get("remote_num_tokens"):
            available = min(available, int(params["remote_num_tokens"]))
        count = available - num_computed_tokens
        return (count, True) if count > 0 else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pushed = push_of(request.kv_transfer_params)
        if pushed is not None:
            if num_external_tokens > 0:
                local = list(blocks.get_unhashed_block_ids())
                self._push_loads[request.request_id] = PushLoad(
                    local, push_name(pushed["memwire_push"]), _blocks_of(len(request.prompt_token_ids), self.block_size))
                self._push_loading.add(request.request_id)
            # (every block hit locally: the prefill's push finds no grant and gives up at its bound)
            pushed["do_remote_prefill"] = False
            return
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
            self._push_loading.discard(request_id)

    # --- prefill: holding blocks for a decode ---

    def request_finished(self, request, block_ids):
        params = request.kv_transfer_params or {}
        self._leased.pop(request.request_id, None)
        if request.request_id in self._push_loading:
            # Decode, aborted while the prefill's layers were coming: its grant ends, and only
            # then does the worker report the load over (vLLM frees the blocks of a request
            # aborted in WAITING_FOR_REMOTE_KVS once its load is reported finished).
            self._push_loading.discard(request.request_id)
            self._push_cancels.append(request.request_id)
            return False, None
        pushing = self._pushing.pop(request.request_id, None)
        if pushing is not None:
            if not pushing[2]:
                return False, None  # never streamed (aborted first): free now
            self._push_finished.append(request.request_id)
            return True, None  # free once its layers are in decode's blocks (or failed)
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
        if self._pushing:
            self._plan_pushes(scheduler_output)
        now = time.monotonic()
        for request_id, entry in self._leased.items():
            params, due = entry
            if now >= due and request_id not in self._loads:
                self._notice(params, TAG_HEARTBEAT)
                entry[1] = now + _beat(params)
        meta = MemwireConnectorMetadata(loads=self._loads, notices=self._notices, sends=self._sends,
                                        push_sends=self._push_sends, push_finished=self._push_finished,
                                        push_loads=self._push_loads, push_cancels=self._push_cancels)
        self._loads, self._notices, self._sends = {}, [], {}
        self._push_sends, self._push_finished, self._push_loads, self._push_cancels = {}, [], {}, []
        return meta

    def _plan_pushes(self, out):
        """Prefill: follows the block ids of the requests it pushes, and marks to stream those
        whose prompt this step completes (each layer is then whole once the forward computed it
        for this step's tokens: earlier chunks' are in already)."""
        for new in out.scheduled_new_reqs:
            entry = self._pushing.get(new.req_id)
            if entry is not None:
                entry[1] = list(new.block_ids[0])
        cached = out.scheduled_cached_reqs
        resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
        for index, request_id in enumerate(cached.req_ids):
            entry = self._pushing.get(request_id)
            added = cached.new_block_ids[index]
            if entry is None or added is None:
                continue
            entry[1] = list(added[0]) if request_id in resumed else entry[1] + list(added[0])
        for request_id, entry in self._pushing.items():
            request, block_ids, streamed = entry
            scheduled = out.num_scheduled_tokens.get(request_id, 0)
            prompt = len(request.prompt_token_ids)
            if streamed or not scheduled or request.num_computed_tokens + scheduled < prompt:
                continue
            params = request.kv_transfer_params
            entry[2] = True
            self._push_sends[request_id] = PushSend(block_ids[:_blocks_of(prompt, self.block_size)],
                                                    params["memwire_push_to"], push_name(params["memwire_push"]))

    def _notice(self, params, tag):
        self._notices.append(NoticeSpec(params["memwire_sideband"], params["memwire_grant"], tag))


def _blocks_of(tokens, block_size):
    return -(-tokens // block_size)


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
