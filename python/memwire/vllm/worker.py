"""The worker half: registers vLLM's KV caches once as a memwire pool; as a prefill, holds a
finished request's blocks under a grant until its decode read them (or the lease ended); as a
decode, reads a request's blocks by index under the prefill's grant and reports every failure
through vLLM's load-error path.

Memwire's calls run on one asyncio loop in a thread of this half's own, so a model step never
waits on the network; vLLM's calls only hand work over and collect what finished.
"""

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import Connector, Descriptor, HttpChannel, HttpEndpoint, LayerReceiver, LayerSender, NatsChannel
from ..errors import MemwireError, NotFoundError
from .kv_pool import KvPool
from .metadata import ORDER_SUFFIX, TAG_DONE, TAG_HEARTBEAT, TAG_RELEASE

log = logging.getLogger("memwire.vllm")

#: Sideband channels to prefills kept open at once (least recently used closed beyond).
MAX_CHANNELS = 64
#: Grants' metadata kept by name for heartbeats and the load (oldest dropped beyond).
MAX_GRANTS_KNOWN = 4096
#: What counters() reports. Decode: loads that ended (failed ones among them), the blocks and
#: bytes they read. Prefill: grants made, and how each ended (read, released, lease over).
COUNTERS = ("loads", "load_failures", "blocks_loaded", "bytes_loaded",
            "grants", "grants_read", "grants_released", "grants_expired")
#: How long a heartbeat or a release waits for the grant's name (it may not be published yet).
NOTICE_LOOKUP_SECONDS = 2.0
#: Threads that wait for pushed layers (a LayerReceiver's wait blocks one): one per request
#: loading at once, up to this; more wait their turn.
MAX_PUSH_WAITERS = 64


class _Push:
    """Prefill: one request's layers on their way into its decode's granted blocks."""

    def __init__(self, spec):
        self.spec = spec
        self.target = None  # a task, on the loop: (the decode's grant, its block ids in order)
        self.sender = None
        self.layers_sent = 0
        self.through = False  # every layer in (or the push failed)
        self.request_finished = False  # vLLM finished the request: free once through


class WorkerHalf:
    def __init__(self, config, producer, consumer, num_blocks):
        self.config = config
        self.producer, self.consumer = producer, consumer
        self.num_blocks = num_blocks
        self.connector = Connector(f"vllm-{config.engine_id}")
        self.kv = None
        self.pool = None
        self._lock = threading.Lock()
        self._done_sending, self._done_recving, self._failed = set(), set(), set()
        self._invalid_blocks = set()
        # What moved, for operators and tests: counts only ever grow (counters()).
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._grants = {}  # prefill: request id -> (grant, name)
        self._channels = {}  # sideband url -> channel (insertion order = use order)
        self._known = {}  # decode: grant name -> its PoolMetadata, fetched once
        self._endpoint = None
        self._publisher = None
        self._scratch = None
        self._pushes = {}  # prefill: request id -> _Push
        self._receivers = {}  # decode: request id -> LayerReceiver of a push
        self._waiters = None  # decode: threads for LayerReceiver.wait
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memwire-vllm", daemon=True)
        self._thread.start()

    # --- vLLM's calls ---

    def register_kv_caches(self, kv_caches):
        self.kv = KvPool(kv_caches, self.num_blocks)
        self.pool = self.connector.register_pool(
            self.kv.regions, name=f"kv-{self.config.engine_id}", remote_read=True,
            # Push mode: a decode grants writes into its blocks (only ever under a request's grant).
            remote_write=self.consumer and self.config.push)
        if self.consumer:
            # Heartbeats and releases read one byte into this: never into vLLM's blocks.
            self._scratch_memory = np.zeros(64, dtype=np.uint8)
            self._scratch = self.connector.register_pool((self._scratch_memory, 64), remote_read=False,
                                                         remote_write=False)
        if self.producer or self.config.push:
            if self.config.nats_url:
                self._publisher = self._channel(self.config.nats_url)
            else:
                self._endpoint = HttpEndpoint(self.config.host, self.config.port)
                self._publisher = HttpChannel(self._endpoint.url)
            if self.producer:
                self._submit(self._take_notices())
        log.info("memwire.vllm: %d layers, %d regions, %d blocks of %d bytes a layer set, grants at %s",
                 len(self.kv.layers), len(self.kv.regions), self.num_blocks, self.kv.block_bytes,
                 self.config.sideband_url if self._publisher is not None else "-")

    def start_load_kv(self, meta):
        if meta is None:
            return
        for request_id, (block_ids, name) in meta.sends.items():
            self._submit(self._hold(request_id, block_ids, name))
        for request_id, spec in meta.loads.items():
            self._submit(self._load(request_id, spec))
        for notice in meta.notices:
            self._submit(self._notify(notice))
        for request_id in meta.push_finished:
            self._submit(self._push_request_finished(request_id))
        for request_id, spec in meta.push_loads.items():
            self._submit(self._receive(request_id, spec))
        for request_id in meta.push_cancels:
            self._submit(self._cancel_receive(request_id))

    def save_kv_layer(self, layer_name, meta):
        """Prefill, push mode: this layer is computed for this step's tokens; the requests whose
        prompt this step completes stream it now. (vLLM binds the step's metadata before the
        forward but may call start_load_kv only after it: the pushes are read from here.)"""
        if meta is None:
            return
        for request_id, spec in meta.push_sends.items():
            if request_id not in self._pushes:
                self._pushes[request_id] = _Push(spec)
            self._submit(self._push_layer(request_id, layer_name))

    def get_transfer_results(self):
        with self._lock:
            sending, self._done_sending = self._done_sending, set()
            recving, self._done_recving = self._done_recving, set()
            failed, self._failed = self._failed, set()
        return sending, recving, failed

    def get_block_ids_with_load_errors(self):
        with self._lock:
            invalid, self._invalid_blocks = self._invalid_blocks, set()
        return invalid

    def counters(self):
        """A copy of this half's counts (COUNTERS): what it loaded and what it handed out."""
        with self._lock:
            return dict(self._counts)

    def _count(self, **amounts):
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] += amount

    def shutdown(self):
        if not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # --- prefill: blocks held under a grant ---

    async def _hold(self, request_id, block_ids, name):
        try:
            grant = self.pool.grant(f"decode/{request_id}"[:160], request_id, self.kv.pool_blocks(block_ids),
                                    access="read", lease=self.config.lease, max_lease=self.config.lease_max)
        except MemwireError as error:
            log.error("memwire.vllm: no grant for request %s (%s): its blocks are freed", request_id, error)
            self._finish_send(request_id)
            return
        self._grants[request_id] = (grant, name)
        self._count(grants=1)
        try:
            await self._publisher.publish_pool(name, grant.metadata, ttl=self.config.lease_max)
        except MemwireError as error:
            log.error("memwire.vllm: grant of request %s not published (%s)", request_id, error)
        self._loop.call_later(max(0.0, grant.expires_in), self._check_lease, request_id)

    def _check_lease(self, request_id):
        held = self._grants.get(request_id)
        if held is not None:
            self._submit(self._end_if_expired(request_id, held[0]))

    async def _end_if_expired(self, request_id, grant):
        # expired() waits for requests admitted before the end to be through (up to the grace):
        # off the loop, which serves the other grants meanwhile.
        if await self._loop.run_in_executor(None, grant.expired):
            log.warning("memwire.vllm: the lease on request %s's blocks ended before its decode "
                        "read them: freed, and any later read is refused", request_id)
            self._count(grants_expired=1)
            await self._end_grant(request_id, None)
        elif request_id in self._grants:
            self._loop.call_later(max(0.0, grant.expires_in), self._check_lease, request_id)

    async def _take_notices(self):
        """The tags of decodes' reads under this prefill's grants. Only the owner's own word
        counts: the request whose grant admitted the read (``n.request``), not the tag's text."""
        while True:
            try:
                n = await self.pool.notification()
            except MemwireError as error:
                if self.pool.closed:
                    return
                log.debug("memwire.vllm: a decode's read failed: %s", error)
                continue
            held = self._grants.get(n.request) if n.authenticated and n.request else None
            if held is None:
                continue
            if n.tag == TAG_HEARTBEAT:
                try:
                    held[0].renew(self.config.lease)
                except MemwireError:
                    pass  # ended: the expiry path frees it
            elif n.tag in (TAG_DONE, TAG_RELEASE):
                self._count(**{"grants_read" if n.tag == TAG_DONE else "grants_released": 1})
                await self._end_grant(n.request, f"decode {'read the blocks' if n.tag == TAG_DONE else 'released them'}")

    async def _end_grant(self, request_id, reason):
        held = self._grants.pop(request_id, None)
        if held is None:
            return
        grant, name = held
        if reason is None:
            # The lease ended: the name stays published until its TTL, so a late decode finds
            # the grant and hears Expired at once instead of waiting out its load bound.
            self._finish_send(request_id)
            return
        await self._loop.run_in_executor(None, grant.close, reason)
        self._finish_send(request_id)
        try:
            await self._publisher.withdraw_pool(name)
        except MemwireError as error:
            log.debug("memwire.vllm: withdrawing %s: %s", name, error)

    def _finish_send(self, request_id):
        with self._lock:
            self._done_sending.add(request_id)

    # --- prefill, push mode: layers into a decode's granted blocks ---

    async def _push_target(self, spec):
        """The decode's grant for the request and its block ids in order (published beside the
        grant: the grant's runs are sorted)."""
        channel = self._channel(spec.sideband)
        grant = await channel.wait_for_pool(spec.name, timeout=self.config.load_timeout)
        order_metadata = await channel.wait_for(spec.name + ORDER_SUFFIX, timeout=self.config.load_timeout)
        order = np.zeros(len(spec.block_ids) + 1, dtype=np.int64)
        read = self.connector.begin_read(order_metadata, [Descriptor(order)])
        await read.wait_for_completion(timeout=self.config.load_timeout)
        count = int(order[0])
        if not 0 < count <= len(spec.block_ids):
            raise MemwireError(f"the decode grants {count} blocks for a prompt of {len(spec.block_ids)}")
        return grant, [int(b) for b in order[1:1 + count]]

    async def _push_layer(self, request_id, layer_name):
        push = self._pushes.get(request_id)
        if push is None or push.through:
            return
        try:
            if push.target is None:  # the first layer: find the decode's grant
                push.target = self._loop.create_task(self._push_target(push.spec))
            grant, theirs = await push.target
            if push.sender is None:
                push.sender = LayerSender(self.connector, self.pool, grant, push.spec.name)
            mine = push.spec.block_ids[len(push.spec.block_ids) - len(theirs):]
            pairs = self.kv.pairs(grant, theirs, mine, self.kv.layer_regions[layer_name])
            push.sender.send(self.kv.layers.index(layer_name), pairs)
            push.layers_sent += 1
            if push.layers_sent == len(self.kv.layers):
                await self._loop.run_in_executor(None, push.sender.finish, self.config.load_timeout)
        except (MemwireError, ValueError, KeyError) as error:
            if push.through:
                return  # another layer's failure ended it
            log.error("memwire.vllm: pushing request %s's layer %s failed: %s: %s", request_id, layer_name,
                      type(error).__name__, error)
            if push.sender is not None:
                push.sender.cancel(f"the prefill's push failed: {error}")  # decode hears it at once
        else:
            if push.layers_sent < len(self.kv.layers):
                return
        push.through = True
        self._end_push(request_id)

    async def _push_request_finished(self, request_id):
        push = self._pushes.get(request_id)
        if push is not None:
            push.request_finished = True
            self._end_push(request_id)
        else:
            self._finish_send(request_id)

    def _end_push(self, request_id):
        push = self._pushes.get(request_id)
        if push is not None and push.through and push.request_finished:
            del self._pushes[request_id]
            if push.sender is not None:
                push.sender.close()
            self._finish_send(request_id)

    # --- decode, push mode: a prefill's layers into granted blocks ---

    async def _receive(self, request_id, spec):
        started = time.monotonic()
        receiver = order = published = None
        try:
            local = spec.local_block_ids
            grant = self.pool.grant(f"prefill/{request_id}"[:160], request_id, self.kv.pool_blocks(local),
                                    access="write", lease=self.config.load_timeout)
            receiver = LayerReceiver(self.pool, grant, spec.name)
            self._receivers[request_id] = receiver
            layout = np.zeros(spec.prompt_blocks + 1, dtype=np.int64)
            layout[0] = len(local)
            layout[1:1 + len(local)] = local
            order = self.connector.create_readable([Descriptor(layout)])
            await self._publisher.publish(spec.name + ORDER_SUFFIX, order.metadata(), ttl=self.config.load_timeout)
            await self._publisher.publish_pool(spec.name, receiver.grant_metadata, ttl=self.config.load_timeout)
            published = spec.name
            if self._waiters is None:
                self._waiters = ThreadPoolExecutor(MAX_PUSH_WAITERS, thread_name_prefix="memwire-vllm-wait")
            for layer in range(len(self.kv.layers)):
                left = self.config.load_timeout - (time.monotonic() - started)
                await self._loop.run_in_executor(self._waiters, receiver.wait, layer, max(left, 0.001))
        except (MemwireError, ValueError) as error:
            with self._lock:
                if self._receivers.get(request_id) is receiver:  # not aborted: a failed load
                    log.error("memwire.vllm: request %s's pushed layers failed: %s: %s", request_id,
                              type(error).__name__, error)
                    self._failed.add(request_id)
                    self._invalid_blocks.update(spec.local_block_ids)
                    self._counts["loads"] += 1
                    self._counts["load_failures"] += 1
                self._done_recving.add(request_id)  # aborted: its blocks are freed now
        else:
            with self._lock:
                self._done_recving.add(request_id)
                self._counts["loads"] += 1
                self._counts["blocks_loaded"] += len(spec.local_block_ids)
                self._counts["bytes_loaded"] += len(spec.local_block_ids) * self.kv.block_bytes
        finally:
            self._receivers.pop(request_id, None)
            await self._end_receive(receiver, order, published, "the request's layers are in")

    async def _cancel_receive(self, request_id):
        """Decode aborted a request whose layers were coming: its grant ends (no later byte of
        the prefill lands) before the load is reported over, which is when vLLM frees its
        blocks."""
        receiver = self._receivers.pop(request_id, None)
        if receiver is not None:  # its wait ends Cancelled: _receive reports the load over
            await self._loop.run_in_executor(None, receiver.cancel, "decode aborted the request")

    async def _end_receive(self, receiver, order, name, reason):
        if receiver is not None:
            await self._loop.run_in_executor(None, receiver.cancel, reason)  # the grant closes
        if order is not None:
            order.close()
        if name is not None:
            for withdraw, what in ((self._publisher.withdraw_pool, name),
                                   (self._publisher.withdraw, name + ORDER_SUFFIX)):
                try:
                    await withdraw(what)
                except MemwireError as error:
                    log.debug("memwire.vllm: withdrawing %s: %s", what, error)

    # --- decode: loading a prefill's blocks ---

    async def _load(self, request_id, spec):
        try:
            if len(spec.remote_block_ids) != len(spec.local_block_ids):
                raise MemwireError(f"{len(spec.remote_block_ids)} remote blocks for "
                                   f"{len(spec.local_block_ids)} local ones")
            grant = await self._grant(spec.sideband, spec.grant, self.config.load_timeout)
            pairs = self.kv.pairs(grant, spec.remote_block_ids, spec.local_block_ids)
            read = self.connector.read_blocks(grant, pairs, self.pool, tag=TAG_DONE)
            await read.wait_for_completion(timeout=self.config.load_timeout)
        except (MemwireError, ValueError) as error:
            log.error("memwire.vllm: loading request %s failed: %s: %s", request_id, type(error).__name__, error)
            with self._lock:
                self._failed.add(request_id)
                self._invalid_blocks.update(spec.local_block_ids)
                self._done_recving.add(request_id)
                self._counts["loads"] += 1
                self._counts["load_failures"] += 1
            return
        finally:
            self._known.pop(spec.grant, None)  # its heartbeats are over
        with self._lock:
            self._done_recving.add(request_id)
            self._counts["loads"] += 1
            self._counts["blocks_loaded"] += len(spec.local_block_ids)
            self._counts["bytes_loaded"] += len(spec.local_block_ids) * self.kv.block_bytes

    async def _grant(self, sideband, name, timeout):
        """A prefill's grant by name: fetched once, then from memory (heartbeats every third
        of a lease, then the load, all need it)."""
        grant = self._known.get(name)
        if grant is None:
            grant = await self._channel(sideband).wait_for_pool(name, timeout=timeout)
            while len(self._known) >= MAX_GRANTS_KNOWN:
                self._known.pop(next(iter(self._known)))
            self._known[name] = grant
        return grant

    async def _notify(self, notice):
        """A heartbeat or a release: one byte of the grant's first block read into scratch
        memory, tagged; the prefill acts on the tag of a read its grant admitted."""
        try:
            grant = await self._grant(notice.sideband, notice.grant, NOTICE_LOOKUP_SECONDS)
            first = grant.to_dict()["request"]["runs"][0][0]  # the grant's first block
            read = self.connector.read_blocks(grant, [(first, 0)], self._scratch, tag=notice.tag, slice=(0, 0, 1))
            await read.wait_for_completion(timeout=NOTICE_LOOKUP_SECONDS)
        except (MemwireError, ValueError, TypeError, KeyError) as error:
            level = logging.DEBUG if isinstance(error, NotFoundError) else logging.WARNING
            log.log(level, "memwire.vllm: %s for %s not delivered: %s", notice.tag, notice.grant, error)

    # --- plumbing ---

    def _channel(self, url):
        channel = self._channels.pop(url, None)
        if channel is None:
            if url.startswith("nats://") or url.startswith("tls://"):
                channel = NatsChannel(url)
            elif url.startswith("http://") or url.startswith("https://"):
                channel = HttpChannel(url)
            else:
                raise ValueError(f"a sideband is http(s):// or nats://, not {url!r}")
            while len(self._channels) >= MAX_CHANNELS:
                self._channels.pop(next(iter(self._channels)))
        self._channels[url] = channel
        return channel

    def _submit(self, coroutine):
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).add_done_callback(_log_unexpected)

    async def _close(self):
        for request_id in list(self._receivers):
            await self._cancel_receive(request_id)
        for push in self._pushes.values():
            if push.sender is not None:
                push.sender.cancel("the prefill is shutting down")
        for request_id in list(self._grants):
            await self._end_grant(request_id, "the prefill is shutting down")
        for pool in (self.pool, self._scratch):
            if pool is not None:
                pool.close("vLLM worker shutdown")
        if self._endpoint is not None:
            self._endpoint.stop()
        if self._waiters is not None:
            self._waiters.shutdown(wait=False)


def _log_unexpected(future):
    """What a coroutine raised that its own handling did not expect: said, never lost."""
    if not future.cancelled() and future.exception() is not None:
        error = future.exception()
        log.error("memwire.vllm: unexpected %s: %s", type(error).__name__, error, exc_info=error)
