"""Pools: memory registered once, cut into equal blocks, moved by index any number of times.

    pool = connector.register_pool([(k_cache, block_bytes), (v_cache, block_bytes)], name="kv")
    text = pool.metadata.to_json()                   # hand it to peers once
    # a peer:
    op = peer.write_blocks(local_pool, [(remote, local), ...], memwire.PoolMetadata.from_json(text),
                           tag="layer-0")
    # the owner, once the tag's bytes are in its memory:
    await pool.tag("layer-0")

Notifications (the tags peers send) are queued by the pool itself, in C++ (memwire::Pool), without
the GIL, and nowhere else; blocking waits release the GIL, and asyncio waits watch the pool's
notification fd from their loop: woken, a wait's own task takes what it waits for, so a cancelled
wait takes none.
"""

import asyncio
import collections
import enum

from . import _memwire
from .descriptor import Descriptor
from .metadata import JsonMetadata, metadata_field
from .errors import CancelledError, InvalidArgumentError, TimeoutError
from .types import Device, OperationKind
from ._support import EndsWithAsyncBlock, native_answer, reason_text, timeout_ms, timeout_seconds

#: A tag a peer sent once its transfer's bytes were in the pool (or, for a read, once it had
#: them all). With ``authenticated``, ``peer`` is the name of the grant (``Pool.metadata_for``)
#: whose token the transfer used: the owner's own word. Without it, the transfer used the
#: pool's shared metadata and ``peer`` is the name the sender gave itself: a label.
#: ``request``: the request whose grant (``Pool.grant``) admitted the transfer, else "".
#: ``kind``: what the transfer did here (an OperationKind): only a WRITE proves that bytes landed
#: in the pool. ``token``: the token it was admitted with, as the metadata its peer used carries
#: it (the pool's shared one, a ``metadata_for`` grant's or a BlockGrant's): the owner's own word.
Notification = collections.namedtuple(
    "Notification", ["peer", "tag", "authenticated", "request", "kind", "token"],
    defaults=[False, "", OperationKind.WRITE, ""],
)


class TagKinds(enum.IntFlag):
    """The transfers whose tags a wait takes (C++'s ``memwire::TagKinds``): writes unless asked
    otherwise, since a read's tag says the peer had the bytes, never that any landed here."""

    WRITES = 1
    READS = 2
    BOTH = 3

_NO_DEADLINE = None


def _seconds(timeout):
    return timeout_seconds(timeout)


def _text(raw):
    return raw.decode("utf-8", "surrogateescape")


def _notification(raw):
    peer, tag, authenticated, request, kind, token = raw
    return Notification(_text(peer), _text(tag), authenticated, _text(request), OperationKind(kind), token)


def as_kinds(kinds):
    """A TagKinds (or its int value; C++ checks the range) -> int."""
    if isinstance(kinds, bool) or not isinstance(kinds, int):
        raise InvalidArgumentError(f"kinds is a TagKinds, not {kinds!r}")
    return int(kinds)


def _encode(value, what):
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgumentError(f"{what} must be str or bytes, not {type(value).__name__}")


class PoolMetadata(JsonMetadata):
    """What a pool's owner hands out once per peer: its regions' block geometry (not one entry
    per block), endpoint, token and generation. ``PoolMetadata.from_json(text)`` is strict
    (InvalidMetadataError); metadata of a closed or re-registered pool is refused by its owner
    (ExpiredError) and never moves bytes."""

    __slots__ = ()
    _native_type = _memwire.PoolMetadata
    _what = "pool metadata"

    name = metadata_field("name")
    generation = metadata_field("generation")
    block_count = metadata_field("block_count")

    @property
    def regions(self):
        """[{device, base, block_size, stride, count}], in block order."""
        return [dict(r, device=Device(r["device"])) for r in self._field("regions")]

    def __repr__(self):
        return (
            f"PoolMetadata(name='{self.name}', generation={self.generation}, "
            f"regions={len(self._field('regions'))}, blocks={self.block_count}, connector='{self.connector}')"
        )


def _lease_ms(lease):
    # C++ refuses a lease <= 0 (InvalidArgument); sub-millisecond leases round up.
    if not isinstance(lease, (int, float)) or isinstance(lease, bool):
        raise InvalidArgumentError(f"a lease is seconds, not {lease!r}")
    return int(lease * 1000) if lease <= 0 else max(1, int(lease * 1000))


def _positive_int(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidArgumentError(f"{what} must be a positive int, not {value!r}")
    return value


class BlockRegion:
    """One region of a pool: ``count`` blocks of ``block_size`` bytes, block i at offset
    ``i * stride`` (stride 0: ``block_size``, blocks back to back) of ``data``.

    ``data`` is anything a Descriptor accepts (a NumPy array, bytearray, memoryview, a CPU
    ``torch.Tensor``, ``(ptr, size, device[, owner])``, a Descriptor); it stays alive as long as
    the pool. ``count`` defaults to as many blocks as fit. Pools take host memory only.
    """

    __slots__ = ("descriptor", "block_size", "stride", "count")

    def __init__(self, data, block_size, stride=0, count=None):
        self.descriptor = data if isinstance(data, Descriptor) else Descriptor(data)
        self.block_size = _positive_int(block_size, "block_size")
        if not isinstance(stride, int) or isinstance(stride, bool) or stride < 0:
            raise InvalidArgumentError(f"stride must be an int >= 0, not {stride!r}")
        if stride and stride < block_size:
            raise InvalidArgumentError(f"stride {stride} is less than block_size {block_size}")
        step = stride or block_size
        size = self.descriptor.size
        if count is None:
            if size < block_size:
                raise InvalidArgumentError(f"a region of {size} bytes holds no block of {block_size}")
            count = (size - block_size) // step + 1
        self.count = _positive_int(count, "count")
        needed = (self.count - 1) * step + block_size
        if needed > size:
            raise InvalidArgumentError(
                f"{self.count} blocks of {block_size} bytes, stride {step}, need {needed} bytes; "
                f"the region has {size}"
            )
        self.stride = stride

    def _spec(self):
        d = self.descriptor
        return (d.ptr, self.block_size, self.stride, self.count, str(d.device))

    def __repr__(self):
        return (
            f"BlockRegion(ptr=0x{self.descriptor.ptr:x}, block_size={self.block_size}, "
            f"stride={self.stride or self.block_size}, count={self.count})"
        )


def as_regions(regions):
    """A BlockRegion, a ``(data, block_size[, stride[, count]])`` tuple, a dict of BlockRegion's
    arguments, or a list of those -> list[BlockRegion]."""

    def one(item):
        if isinstance(item, BlockRegion):
            return item
        if isinstance(item, dict):
            return BlockRegion(**item)
        if isinstance(item, tuple) and 2 <= len(item) <= 4:
            return BlockRegion(*item)
        raise InvalidArgumentError(
            f"a region is a BlockRegion, (data, block_size[, stride[, count]]) or a dict, not {type(item).__name__}"
        )

    if isinstance(regions, (BlockRegion, dict)) or (
        isinstance(regions, tuple) and 2 <= len(regions) <= 4 and isinstance(regions[1], int)
        and not isinstance(regions[0], (tuple, BlockRegion, dict))
    ):
        return [one(regions)]
    if not isinstance(regions, (list, tuple)) or not regions:
        raise InvalidArgumentError("register_pool needs at least one region")
    return [one(item) for item in regions]


def _pair(item):
    remote, local, *offsets = item
    if len(offsets) not in (0, 2):
        raise ValueError
    remote_offset, local_offset = offsets or (0, 0)
    return (int(remote), int(local), int(remote_offset), int(local_offset))


def as_pairs(pairs):
    """Block pairs -> list of (remote, local, remote_offset, local_offset) int tuples (C++'s
    BlockPair). Each pair is ``(remote, local)`` or ``(remote, local, remote_offset,
    local_offset)`` (the offsets count only in a sliced transfer); also an (N, 2) or (N, 4)
    array."""
    if pairs.__class__ is list:
        # The usual call, taken as it is: (remote, local) tuples of ints >= 0. Anything else
        # (an offset, a bool, a numpy int, a bad pair) goes the general way below.
        out = []
        for item in pairs:
            if item.__class__ is tuple and len(item) == 2:
                remote, local = item
                if remote.__class__ is int and local.__class__ is int and remote >= 0 and local >= 0:
                    out.append((remote, local, 0, 0))
                    continue
            break
        else:
            if out:
                return out
    if hasattr(pairs, "tolist") and not isinstance(pairs, (list, tuple)):
        pairs = pairs.tolist()
    try:
        out = [_pair(item) for item in pairs]
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            "pairs are (remote block, local block[, remote_offset, local_offset]) tuples"
        ) from None
    for pair in out:
        if min(pair) < 0:
            raise InvalidArgumentError(f"block indexes and offsets are >= 0, not {pair}")
    if not out:
        raise InvalidArgumentError("no blocks to move")
    return out


def as_slice(slice):
    """None, or ``(remote_offset, local_offset, length)`` (C++'s BlockSlice) -> int tuple; C++
    checks it against both pools' blocks."""
    if slice is None:
        return None
    try:
        remote_offset, local_offset, length = slice
        out = (int(remote_offset), int(local_offset), int(length))
    except (TypeError, ValueError):
        raise InvalidArgumentError("a slice is (remote_offset, local_offset, length)") from None
    if min(out) < 0:
        raise InvalidArgumentError(f"a slice's offsets and length are >= 0, not {out}")
    return out


def as_tag(tag):
    return _encode(tag, "a tag")


class Pool(EndsWithAsyncBlock):
    """A registered pool (``Connector.register_pool``). Closing it (``close(reason="")``, leaving
    its ``with`` block, or dropping it) revokes peers' access at once, fails the transfers that
    use it here (and waits until none touches its memory), and ends every wait with
    CancelledError (carrying ``reason``).

    Peers' tags are taken with ``next_notification``/``wait_for_tag`` (blocking, GIL released)
    or, in asyncio, ``await pool.notification()``, ``await pool.tag(name)`` and
    ``async for n in pool.notifications()``.
    """

    def __init__(self, connector, native, regions, readonly):
        self._connector = connector
        self._native = native
        self._regions = regions  # keeps the memory's owners alive (the native side does too)
        self._readonly = readonly
        self._metadata = None
        self._waiters = collections.deque()  # futures of asyncio waits, oldest first
        self._reader_loop = None

    @property
    def metadata(self):
        """The PoolMetadata to hand to peers (the same for the pool's whole life)."""
        if self._metadata is None:
            self._metadata = PoolMetadata(self._native.metadata())
        return self._metadata

    @property
    def name(self):
        return self.metadata.name

    def metadata_for(self, peer):
        """PoolMetadata with a token of ``peer``'s own (the same while the grant lives): its
        transfers' notifications carry ``peer``, authenticated, and ``revoke(peer)`` ends its
        access alone. ``peer``: 1 to 160 bytes, no NUL."""
        return PoolMetadata(self._native.metadata_for(_encode(peer, "peer")))

    def revoke(self, peer):
        """Ends ``peer``'s grant: its token is refused from now on. False when it had none."""
        return self._native.revoke(_encode(peer, "peer"))

    def grant(self, peer, request_id, blocks, access="write", lease=10.0, max_lease=None):
        """Request-scoped access (C++'s ``Pool::grant``): ``peer`` may move ``blocks`` of this
        pool with ``access`` ("read", "write" or "read_write") for request ``request_id``, for
        ``lease`` seconds, through the returned BlockGrant's ``metadata`` and nothing else.
        Anything outside those blocks, after ``close()`` or after the lease is refused before
        any byte lands. ``max_lease``: how far from now ``BlockGrant.renew`` may carry the
        lease (None: no further than ``lease``). ``peer`` is the owner's name for whoever holds
        the metadata (a bearer grant: the token is the credential)."""
        from .grant import BlockGrant, access_code

        if hasattr(blocks, "tolist") and not isinstance(blocks, (list, tuple)):
            blocks = blocks.tolist()
        try:
            indexes = [int(b) for b in blocks]
        except (TypeError, ValueError):
            raise InvalidArgumentError("blocks are block indexes") from None
        if any(b < 0 for b in indexes):
            raise InvalidArgumentError("block indexes are >= 0")
        native = self._native.grant(
            _encode(peer, "peer"), _encode(request_id, "request_id"), indexes,
            access_code(access), _lease_ms(lease),
            0 if max_lease is None else _lease_ms(max_lease),
        )
        return BlockGrant(native)

    peer_faults = native_answer(
        "peer_faults", "Frames peers sent against the protocol (each refused, its connection closed)."
    )
    refusals = native_answer(
        "refusals",
        "Well-formed requests refused for what they asked (an access the pool or a grant does not "
        "allow, blocks outside a grant's, a wrong token), before any byte moved; their connections "
        "stay. Not peer faults.",
    )
    block_count = native_answer("block_count")

    @property
    def regions(self):
        return list(self._regions)

    @property
    def readonly(self):
        """True when the memory may only be a source (peers may not write, reads may not land)."""
        return self._readonly

    @property
    def closed(self):
        return self._native.closed

    @property
    def queued_notifications(self):
        """Notifications received and not yet taken."""
        return self._native.queued()

    def close(self, reason=""):
        """Ends the pool (C++'s ``Pool::close(reason)``); idempotent."""
        self._native.close(reason_text(reason))

    def __repr__(self):
        state = "closed" if self.closed else f"{self.block_count} blocks"
        return f"<Pool '{self._metadata.name if self._metadata else ''}' {state}>"

    # --- taking notifications ---

    def _taker(self, tag, from_peer, kinds):
        if tag is None:
            def take():
                raw = self._native.try_next()
                return None if raw is None else _notification(raw)
        else:
            raw_tag, raw_from, which = as_tag(tag), _encode(from_peer, "from_peer"), as_kinds(kinds)

            def take():
                raw = self._native.try_tag(raw_tag, raw_from, which)
                return None if raw is None else _notification(raw)
        return take

    def next_notification(self, timeout=None):
        """The next notification in arrival order, waiting at most ``timeout`` seconds (GIL
        released). Raises TimeoutError, PeerLostError (an admitted tagged transfer failed, or its
        peer was lost in the middle of it: once per transfer, naming its tag), CancelledError
        once closed."""
        return _notification(self._native.next(timeout_ms(timeout)))

    def wait_for_tag(self, tag, timeout=None, from_peer="", kinds=TagKinds.WRITES):
        """Waits for the notification with this tag (others stay queued), from ``from_peer``
        when given (C++'s ``from``, a keyword in Python), of a transfer of ``kinds`` (writes
        alone by default: a read's tag proves no byte landed here). Raises like
        next_notification when such a transfer with that tag failed; another transfer's failure
        leaves this wait alone."""
        seconds = _seconds(timeout)
        raw_tag, raw_from, which = as_tag(tag), _encode(from_peer, "from_peer"), as_kinds(kinds)
        return _notification(self._native.wait_for_tag(raw_tag, timeout_ms(seconds), raw_from, which))

    async def notification(self, timeout=None):
        """``await pool.notification()``: next_notification for asyncio (the loop is not held)."""
        return await self._wait(self._taker(None, "", None), _seconds(timeout))

    async def tag(self, tag, timeout=None, from_peer="", kinds=TagKinds.WRITES):
        """``await pool.tag("layer-3")``: wait_for_tag for asyncio."""
        return await self._wait(self._taker(tag, from_peer, kinds), _seconds(timeout))

    async def notifications(self, timeout=None):
        """``async for n in pool.notifications():`` every notification in arrival order, until
        the pool is closed. ``timeout``: seconds to wait for each (TimeoutError); None waits as
        long as it takes."""
        seconds = _NO_DEADLINE if timeout is None else _seconds(timeout)
        take = self._taker(None, "", None)
        while True:
            try:
                yield await self._wait(take, seconds)
            except CancelledError:
                if self.closed:
                    return
                raise

    async def _wait(self, take, seconds):
        # The task takes (in C++) only after it woke: a wait cancelled meanwhile takes nothing,
        # and what it would have taken stays queued for the next.
        loop = asyncio.get_running_loop()
        deadline = None if seconds is _NO_DEADLINE else loop.time() + seconds
        while True:
            found = take()  # raises PeerLost, Cancelled
            if found is not None:
                return found
            await self._woken(loop, deadline, seconds)

    async def _woken(self, loop, deadline, seconds):
        # Until the fd says something arrived (or the pool closed), or TimeoutError at the deadline.
        if self._reader_loop is not loop:
            if self._waiters:
                raise InvalidArgumentError("a pool's asyncio waits belong to one event loop at a time")
            self._reader_loop = loop
        future = loop.create_future()
        self._waiters.append(future)
        if len(self._waiters) == 1:
            loop.add_reader(self._native.fd, self._ready)
        timer = None
        if deadline is not None:
            timer = loop.call_at(deadline, _time_out, future, seconds)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()
            self._waiters.remove(future)
            if not self._waiters:
                loop.remove_reader(self._native.fd)

    def _ready(self):
        # On the loop: memwire queued something (or the pool closed). Every wait wakes, oldest
        # first, and its task tries to take what it waits for.
        self._native.drain()
        for future in self._waiters:
            if not future.done():
                future.set_result(None)


def _time_out(future, seconds):
    if not future.done():
        future.set_exception(TimeoutError(f"no notification within {seconds:g} s"))


__all__ = ["BlockRegion", "Notification", "Pool", "PoolMetadata", "TagKinds"]
