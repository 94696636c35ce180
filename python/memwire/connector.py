"""Connector and the four operations, as nixl_connect shapes them, over memwire's C++ core.

Completion reaches asyncio through memwire's completion callback: the C++ side calls
``_deliver`` on the thread that finished the operation, which hands the status to the event loop
with ``call_soon_threadsafe``. Nothing polls.
"""

import asyncio

from . import _memwire
from .connection import SharedConnection
from .descriptor import Descriptor, as_descriptors
from .errors import InvalidArgumentError, MemwireError, TimeoutError
from .metadata import RdmaMetadata
from .pool import Pool, PoolMetadata, as_pairs, as_regions, as_slice, as_tag
from .types import OperationKind, OperationStatus
from ._support import DEFAULT_TIMEOUT, TIMED_OUT, EndsWithAsyncBlock, completions_for, reason_text
from ._support import native_answer, read_only, timeout_ms, timeout_seconds

#: How long wait_for_completion watches an unfinished operation before it lets the event loop
#: wake it: a small transfer usually ends sooner than a loop wake-up takes (0: never watch).
#: Holds the loop at most this long per wait.
SPIN_MICROSECONDS = 20

_COMPLETE = OperationStatus.COMPLETE
_COMPLETE_CODE = _COMPLETE.value  # what the native wait returns for it


def _deliver(loop, future, status):
    # For callables run on a memwire thread (Worker.request's stop signal and the like).
    try:
        loop.call_soon_threadsafe(_settle, future, status)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


def _settle(future, status):
    if not future.done():
        future.set_result(status)


def _expire(waiter):
    if not waiter.done():
        waiter.set_result(False)


class _Operation(EndsWithAsyncBlock):
    """What the four operations share: status, waiting with a deadline, cancel, context managers.

    The object returned by ``Connector.create_readable`` & co. is also awaitable (it returns
    itself), so both ``op = await connector.begin_read(...)`` and the older, non-awaited
    ``with connector.begin_read(...) as op:`` work.
    """

    _end_of_block = "_cancel_quietly"

    _waiters = 0  # tasks awaiting the completion future directly (0 or 1)
    _loop = _done = None  # the loop armed for (and its future), when armed

    def __init__(self, connector, native, descriptors, loop):
        self._connector = connector  # the C++ connector must outlive the operation
        self._native = native
        self._descriptors = descriptors  # keeps the memory's owners alive
        if loop is not None:
            native.notify_via(*self._arm(loop))

    def _arm(self, loop):
        self._loop = loop
        notifier, self._token, self._done = completions_for(loop).arm()
        return notifier, self._token

    def _completion(self):
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._native.notify_via(*self._arm(loop))
        return self._done

    def _completions_forget(self):
        # Ended without the loop's help: its future (resolved later by the eventfd) is dropped.
        completions = completions_for(self._loop)
        completions.futures.pop(self._token, None)
        self._loop = None

    def __await__(self):
        return self
        yield  # pragma: no cover  (makes this a generator: `await op` gives op)

    @property
    def status(self):
        return OperationStatus(self._native.status())

    @property
    def kind(self):
        return OperationKind(self._native.kind())

    @property
    def descriptors(self):
        return list(self._descriptors)

    transport = native_answer(
        "transport", 'The transport that moved the bytes: "shm", "tcp" or "verbs" ("" before known).'
    )
    error_message = native_answer("error_message")

    async def wait_for_completion(self, timeout=None):
        """Waits until the operation ends, at most ``timeout`` seconds (default DEFAULT_TIMEOUT).

        Returns COMPLETE, the one status it waits for; raises why not as a MemwireError
        subclass: CancelledError carrying the reason when it was cancelled (by either side;
        ``status`` then reads CANCELLED after a local cancel), the failure (PeerLostError,
        SizeMismatchError, ...), TimeoutError when the deadline passes first (the operation
        goes on; cancel it or wait again). Cancelling the awaiting task cancels the operation.
        """
        seconds = timeout_seconds(timeout)
        done = self._completion()
        if (not done.done() and SPIN_MICROSECONDS > 0 and self._waiters == 0
                and not completions_for(self._loop).watching):
            # A small transfer ends within microseconds: watching it briefly costs less than
            # the loop's wake-up. The loop is held that long at most. Not while other waits of
            # this loop are pending (many transfers in flight): the loop wakes for those anyway,
            # and each wait in turn held it (a 64-owner fan-in: 1.3 ms a round in which the
            # loop ran nothing else).
            status = self._native.spin(SPIN_MICROSECONDS)
            if status >= 0:
                self._completions_forget()
                if status == 3:
                    return OperationStatus.COMPLETE
                return OperationStatus(self._native.wait(0))
        if done.done():
            status = done.result()
        elif self._waiters == 0:
            # The one waiter awaits the completion future itself; its deadline is watched by the
            # loop's single timer, which cancels this task when it passes.
            completions = completions_for(self._loop)
            entry = completions.watch(self, self._loop.time() + seconds)
            self._waiters = 1
            try:
                status = await done
            except asyncio.CancelledError:
                # The task was cancelled (and the future with it): the operation is cancelled;
                # a later wait arms a new future.
                completions.futures.pop(self._token, None)
                self._loop = None
                self._cancel_quietly()
                raise
            finally:
                self._waiters = 0
                completions.unwatch(entry)
            if status == TIMED_OUT:
                raise TimeoutError(
                    f"{type(self).__name__} not finished after {seconds:g} s (status {self.status.name})"
                )
        else:
            # Another task awaits the future itself: this one watches it without awaiting it,
            # so that either leaving (timeout, cancel) spares the other.
            loop = self._loop
            expired = loop.create_future()
            timer = loop.call_later(seconds, _expire, expired)
            try:
                while True:
                    done = self._completion()  # a timed-out or cancelled future is replaced
                    if done.done() and done.result() != TIMED_OUT:
                        status = done.result()
                        break
                    if expired.done():
                        raise TimeoutError(
                            f"{type(self).__name__} not finished after {seconds:g} s (status {self.status.name})"
                        )
                    if not done.done():
                        await asyncio.wait((done, expired), return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                self._cancel_quietly()
                raise
            finally:
                timer.cancel()
        if status == 3:
            return OperationStatus.COMPLETE
        return OperationStatus(self._native.wait(0))  # raises the failure when it errored

    def wait(self, timeout=None):
        """Blocking wait, for code outside asyncio (GIL released while it waits); returns and
        raises as wait_for_completion does."""
        status = self._native.wait(timeout_ms(timeout))
        if status == _COMPLETE_CODE:
            return _COMPLETE  # the usual answer, without an Enum lookup
        return OperationStatus(status)

    def _cancel_quietly(self):
        try:
            if not self.status.is_final:
                self._native.cancel()
        except MemwireError:
            pass  # it errored meanwhile: nothing left to cancel

    def cancel(self, reason=""):
        """Cancels: an active operation stops, a passive one revokes the remote's access at once;
        waits end with CancelledError carrying ``reason`` (a block transfer's owner hears it
        too). Idempotent; cancelling an errored operation raises (nixl_connect's rule)."""
        self._native.cancel(reason_text(reason))

    def close(self):
        """What dropping it does in C++, now: cancels it when unfinished and lets go of its
        memory (later calls raise InvalidArgumentError)."""
        self._native.close()
        self._descriptors = []

    def __repr__(self):
        try:
            status = self.status.name
        except MemwireError:
            status = "CLOSED"
        return f"<{type(self).__name__} {status}>"


class _PassiveOperation(_Operation):
    def metadata(self, hex_encode=False):
        """The RdmaMetadata to hand to the remote (``hex_encode`` is accepted and ignored:
        memwire's metadata is JSON text)."""
        return RdmaMetadata(self._native.metadata())

    def renew(self, lifetime):
        """Keeps remote access open for ``lifetime`` more seconds; returns the new metadata."""
        return RdmaMetadata(self._native.renew(timeout_ms(lifetime)))


class ReadableOperation(_PassiveOperation):
    """Local memory a remote may read; completes when the reader is done."""


class WritableOperation(_PassiveOperation):
    """Local memory a remote may write; completes when the writer is done."""


class ReadOperation(_Operation):
    """Reads remote readable memory into local descriptors."""

    def results(self):
        """The local descriptors, filled; InvalidArgumentError before the read completed."""
        self._native.check_results()
        return list(self._descriptors)


class WriteOperation(_Operation):
    """Writes local descriptors into remote writable memory."""


class BlockTransfer(_Operation):
    """Blocks moved between a local and a remote pool (``Connector.read_blocks`` /
    ``write_blocks``): the operations' status, waits, awaiting, cancel and context managers.
    ``cancel(reason)`` ends the owner's waits for its tag with CancelledError carrying it (tcp,
    shm; verbs carries the code alone)."""

    @property
    def pool(self):
        """The local pool."""
        return self._descriptors[0] if self._descriptors else None


def _looks_like_metadata(value):
    return isinstance(value, (RdmaMetadata, str, dict))


class Connector:
    """One per worker: moves memory to and from other workers' connectors.

    ``Connector()`` takes a random name (32 hex digits); equality is by name. Options:
    ``transports`` (best first: "verbs", "shm", "tcp"), ``bind_address``, ``port``,
    ``metadata_ttl`` and ``connect_timeout`` (seconds), ``shm_direct_reads`` (peers of the same
    user read this connector's pools themselves over shm: ``ShmOptions::direct_reads`` in the
    C++ API, which says what it exposes and what memwire then no longer checks), ``busy_poll``
    (seconds an event loop keeps polling after serving a peer's request before it sleeps:
    ``StreamOptions::busy_poll``, default 50 us, 0 off, at most 10 ms); MEMWIRE_* environment
    variables apply unless ``environment=False``.
    """

    def __init__(
        self,
        name=None,
        *,
        transports=None,
        bind_address=None,
        port=0,
        metadata_ttl=None,
        connect_timeout=None,
        shm_direct_reads=None,
        busy_poll=None,
        environment=True,
        worker_id=None,
        runtime=None,
        namespace=None,
        enable_progress_thread=None,
    ):
        config = _memwire.ConnectorConfig()
        name = name if name is not None else worker_id
        if name is not None:
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError("a connector name is a non-empty string")
            config.name = name
        if transports is not None:
            config.transports = list(transports)
        if bind_address is not None:
            config.bind_address = bind_address
        config.port = int(port)
        if metadata_ttl is not None:
            config.metadata_ttl_ms = 0 if metadata_ttl == 0 else timeout_ms(metadata_ttl)
        if connect_timeout is not None:
            config.connect_timeout_ms = timeout_ms(connect_timeout)
        if shm_direct_reads is not None:
            if not isinstance(shm_direct_reads, bool):
                raise InvalidArgumentError("shm_direct_reads is True, False or None")
            config.shm_direct_reads = int(shm_direct_reads)
        if busy_poll is not None:
            if (
                isinstance(busy_poll, bool)
                or not isinstance(busy_poll, (int, float))
                or not 0 <= busy_poll <= 0.01
            ):
                raise InvalidArgumentError("busy_poll is None or 0 to 0.01 seconds")
            config.busy_poll_us = round(busy_poll * 1e6)
        config.from_environment = bool(environment)
        self._native = _memwire.Connector(config)
        # Accepted for nixl_connect's older signature (Dynamo's runtime); memwire needs neither.
        self._runtime = runtime
        self._namespace = namespace or ""
        # nixl_connect's newer switch for NIXL's progress thread: memwire's connector always
        # has its own (completions arrive without the caller polling), so it changes nothing.
        if enable_progress_thread is not None and not isinstance(enable_progress_thread, bool):
            raise InvalidArgumentError("enable_progress_thread is True, False or None")
        self._connection = SharedConnection()

    name = read_only("_native.name")
    hostname = read_only("_native.hostname")

    @property
    def namespace(self):
        return self._namespace

    def runtime(self):
        return self._runtime

    @property
    def is_cuda_available(self):
        """Whether CUDA memory can move: the CUDA driver loads and sees a device (C++'s
        ``memwire::cuda_device_count()``, the driver the connector moves CUDA memory with)."""
        return _memwire.cuda_device_count() > 0

    @property
    def transports(self):
        return self._native.transports()

    async def initialize(self):
        """Deprecated no-op, as in nixl_connect."""
        return self

    async def _create_connection(self):
        """The connector's one Connection (nixl_connect's shared connection), made on first
        use; what ``Descriptor.register_with_connector`` takes. Dynamo's components call it."""
        return self._connection.get(self)

    def __eq__(self, other):
        return isinstance(other, Connector) and self.name == other.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"Connector(name='{self.name}', transports={self.transports})"

    # The running loop or None, called directly (no Python frame of its own).
    _loop = staticmethod(asyncio._get_running_loop)

    def create_readable(self, local_descriptors):
        """Makes local memory readable by a remote; await it or use it directly."""
        descriptors = as_descriptors(local_descriptors, writable_target=False)
        native = self._native.create_readable([d._spec() for d in descriptors], descriptors)
        return ReadableOperation(self, native, descriptors, self._loop())

    def create_writable(self, local_descriptors):
        """Makes local memory writable by a remote; await it or use it directly."""
        descriptors = as_descriptors(local_descriptors, writable_target=True)
        native = self._native.create_writable([d._spec() for d in descriptors], descriptors)
        return WritableOperation(self, native, descriptors, self._loop())

    def begin_read(self, remote_metadata, local_descriptors):
        """Reads a remote readable operation into local memory; the transfer starts now.

        Takes (remote_metadata, local_descriptors), as nixl_connect does now, or the older
        (local_descriptors, remote_metadata): the argument types tell them apart."""
        if not _looks_like_metadata(remote_metadata) and _looks_like_metadata(local_descriptors):
            remote_metadata, local_descriptors = local_descriptors, remote_metadata
        return self._begin(ReadOperation, remote_metadata, local_descriptors)

    def begin_write(self, local_descriptors, remote_metadata):
        """Writes local memory into a remote writable operation; the transfer starts now.

        Takes (local_descriptors, remote_metadata); (remote_metadata, local_descriptors) works
        too."""
        if _looks_like_metadata(local_descriptors) and not _looks_like_metadata(remote_metadata):
            local_descriptors, remote_metadata = remote_metadata, local_descriptors
        return self._begin(WriteOperation, remote_metadata, local_descriptors)

    def _begin(self, cls, remote_metadata, local_descriptors):
        """begin_read (cls ReadOperation) and begin_write, their arguments in order: the transfer
        starts now, armed for the running loop's completions when there is one."""
        reading = cls is ReadOperation
        remote = RdmaMetadata.coerce(remote_metadata)  # pairing is checked by the core
        descriptors = as_descriptors(local_descriptors, writable_target=reading)
        loop = self._loop()
        op = cls.__new__(cls)
        notifier, token = op._arm(loop) if loop is not None else (None, 0)
        specs = [d._spec() for d in descriptors]
        if reading:
            native = self._native.begin_read(remote._native, specs, notifier, token, descriptors)
        else:
            native = self._native.begin_write(specs, remote._native, notifier, token, descriptors)
        op._connector, op._native, op._descriptors = self, native, descriptors
        return op

    # --- pools ---

    def register_pool(self, regions, name="", remote_read=True, remote_write=True,
                      max_queued_notifications=65536, max_request_grants=4096, **budgets):
        """Registers memory once as a pool of equal blocks; returns a Pool (a context manager).

        ``regions``: a ``(data, block_size[, stride[, count]])`` tuple, a BlockRegion, or a list
        of them; blocks are numbered across regions in order. ``remote_read``/``remote_write``
        say what peers may do; ``max_queued_notifications`` bounds tags received and not yet
        taken (one more fails its sender's transfer); ``max_request_grants`` bounds the request
        grants (``Pool.grant``) live at once. The queue's shares, C++'s PoolOptions by name:
        ``max_queued_per_peer``, ``max_queued_shared``, ``max_queued_per_connection``,
        ``max_queued_shared_reads`` (keywords; any other raises InvalidArgumentError). Read-only
        memory (bytes) needs ``remote_write=False`` and can only be a source."""
        items = as_regions(regions)
        readonly = any(r.descriptor.readonly for r in items)
        if readonly and remote_write:
            raise InvalidArgumentError("read-only memory (bytes?) cannot take writes: pass remote_write=False")
        if not isinstance(name, str):
            raise InvalidArgumentError("a pool name is a string")
        queued = int(max_queued_notifications)
        if queued <= 0:
            raise InvalidArgumentError("max_queued_notifications must be positive")
        native = self._native.register_pool(
            [r._spec() for r in items], name, bool(remote_read), bool(remote_write), queued, items,
            int(max_request_grants), {key: int(value) for key, value in budgets.items()},
        )
        return Pool(self, native, items, readonly)

    def _local_pool(self, pool, receiving):
        if not isinstance(pool, Pool):
            raise InvalidArgumentError(f"the local side is a Pool, not {type(pool).__name__}")
        if receiving and pool.readonly:
            raise InvalidArgumentError("a read-only pool cannot receive blocks")
        return pool

    def _block_transfer(self, remote_metadata, pairs, local_pool, tag, slice, receiving):
        """read_blocks (``receiving``) and write_blocks: their arguments checked in one order,
        then the native call, armed for the running loop's completions when there is one."""
        # The usual call's exact types pass as they are; anything else goes through the checks
        # (and their errors), in the same order.
        if remote_metadata.__class__ is PoolMetadata:
            remote = remote_metadata
        else:
            remote = PoolMetadata.coerce(remote_metadata)
        if local_pool.__class__ is Pool and not (receiving and local_pool._readonly):
            pool = local_pool
        else:
            pool = self._local_pool(local_pool, receiving=receiving)
        blocks = as_pairs(pairs)
        raw_tag = b"" if tag.__class__ is str and not tag else as_tag(tag)
        part = None if slice is None else as_slice(slice)
        loop = self._loop()
        op = BlockTransfer.__new__(BlockTransfer)
        notifier, token = op._arm(loop) if loop is not None else (None, 0)
        try:
            if receiving:
                native = self._native.read_blocks(
                    remote._native, blocks, pool._native, raw_tag, part, notifier, token, pool
                )
            else:
                native = self._native.write_blocks(
                    pool._native, blocks, remote._native, raw_tag, part, notifier, token, pool
                )
        except BaseException:
            if loop is not None:
                op._completions_forget()
            raise
        op._connector, op._native, op._descriptors = self, native, [pool]
        return op

    def read_blocks(self, remote_metadata, pairs, local_pool, tag="", slice=None):
        """Reads remote blocks into local ones; ``pairs``: (remote block, local block) indexes
        (a list of pairs or an (N, 2) array; (remote, local, remote_offset, local_offset) or an
        (N, 4) array with a slice). When ``tag`` is given, the owner receives it once every byte
        is here. ``slice=(remote_offset, local_offset, length)`` moves only that part of each
        pair's blocks (C++'s BlockSlice; pools of different block sizes pair when it fits
        both). Returns a BlockTransfer (await it or use it directly)."""
        return self._block_transfer(remote_metadata, pairs, local_pool, tag, slice, receiving=True)

    def write_blocks(self, local_pool, pairs, remote_metadata, tag="", slice=None):
        """Writes local blocks into remote ones; ``pairs`` and ``slice`` as in read_blocks.
        The owner receives ``tag`` only once the blocks are in its memory."""
        return self._block_transfer(remote_metadata, pairs, local_pool, tag, slice, receiving=False)


__all__ = [
    "BlockTransfer",
    "Connector",
    "Descriptor",
    "ReadableOperation",
    "WritableOperation",
    "ReadOperation",
    "WriteOperation",
    "DEFAULT_TIMEOUT",
]
