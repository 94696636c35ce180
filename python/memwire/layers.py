"""Layer-wise streaming of a KV cache (C++'s ``memwire::LayerSender`` / ``LayerReceiver``):
prefill writes layer i's blocks into decode's pool as soon as it is computed, tagged
``"<stream>/<layer>"``; decode waits for layer i before it computes layer i.

    # prefill
    sender = memwire.LayerSender(connector, kv_pool, decode_metadata, "req-17")
    for i in range(layers):
        compute(i); sender.send(i, pairs_of(i))           # returns at once
    sender.finish(timeout=10)
    # decode
    receiver = memwire.LayerReceiver(kv_pool, grant, "req-17")   # or (kv_pool, "req-17")
    for i in range(layers):
        receiver.wait(i, timeout=10); compute(i)

``sender.cancel(reason)`` ends decode's waits with CancelledError and the reason;
``receiver.cancel(reason)`` closes the request's grant (prefill's transfers fail at once) and
ends every wait of the stream. The waits block with the GIL released: the C++ classes give no
fd to hook an event loop to, so asyncio code runs them in a thread
(``await asyncio.to_thread(receiver.wait, i, 10)``) or awaits ``pool.tag(layer_tag(...))``.
"""

from . import _memwire
from ._support import EndsWithBlock, reason_text, timeout_ms
from .errors import InvalidArgumentError
from .grant import BlockGrant
from .pool import Pool, PoolMetadata, TagKinds, _encode, as_kinds, as_pairs, as_slice


def layer_tag(stream, layer):
    """The tag of ``layer`` of ``stream``: ``"<stream>/<layer>"``."""
    return _memwire.layer_tag(stream, layer).decode("utf-8", "surrogateescape")


def _pool(pool):
    if not isinstance(pool, Pool):
        raise InvalidArgumentError(f"a layer stream's pool is a Pool, not {type(pool).__name__}")
    return pool


class _Closable(EndsWithBlock):
    """close() is what dropping it does in C++, now: a sender cancels its unfinished layers, a
    receiver closes its grant; later calls raise InvalidArgumentError."""

    _native = None

    @property
    def _live(self):
        if self._native is None:
            raise InvalidArgumentError(f"this {type(self).__name__} was closed")
        return self._native

    def close(self):
        self._native = None


class LayerSender(_Closable):
    """Prefill's side: ``send(layer, pairs, slice=None)`` begins writing a layer's blocks
    (remote <- local pairs, as in ``Connector.write_blocks``), ``finish(timeout)`` waits for all
    of them, ``cancel(reason)`` ends the stream: from another thread too, where it ends a
    finish in flight with CancelledError. Closing it (or dropping it) cancels unfinished
    layers."""

    def __init__(self, connector, local_pool, remote_metadata, stream):
        pool = _pool(local_pool)
        remote = PoolMetadata.coerce(remote_metadata)
        self._native = _memwire.LayerSender(connector._native, pool._native, pool, remote._native,
                                            stream)
        self.stream = stream

    def send(self, layer, pairs, slice=None):
        self._live.send(int(layer), as_pairs(pairs), as_slice(slice))

    def finish(self, timeout=None):
        """Waits until every layer sent so far is in decode's pool; raises the first failure,
        TimeoutError, or CancelledError after cancel()."""
        self._live.finish(timeout_ms(timeout))

    def cancel(self, reason=""):
        """Ends the stream (idempotent); later send()s and finish()es raise CancelledError."""
        self._live.cancel(reason_text(reason))

    @property
    def layers_sent(self):
        return self._live.layers_sent()


class LayerReceiver(_Closable):
    """Decode's side: ``LayerReceiver(pool, stream, from_peer="")`` or, with a request grant,
    ``LayerReceiver(pool, grant, stream)`` (the grant moves into it: hand ``grant_metadata``
    to the sender; only transfers under the grant's token count; ``cancel()`` closes it).
    ``from_peer`` is C++'s ``from`` (a keyword in Python). A layer arrives with a tagged write;
    ``kinds`` (a TagKinds) takes reads too, or instead, when asked for."""

    def __init__(self, pool, stream_or_grant, stream=None, from_peer="", kinds=TagKinds.WRITES):
        pool = _pool(pool)
        which = as_kinds(kinds)
        if isinstance(stream_or_grant, BlockGrant):
            if stream is None:
                raise InvalidArgumentError("LayerReceiver(pool, grant, stream) needs the stream")
            self._native = _memwire.LayerReceiver(pool._native, pool, stream_or_grant._native, stream, which)
            self._metadata = stream_or_grant.metadata
            self.stream = stream
        else:
            if stream is not None:
                raise InvalidArgumentError("LayerReceiver(pool, stream, from_peer=...)")
            self._native = _memwire.LayerReceiver(pool._native, pool, stream_or_grant,
                                                  _encode(from_peer, "from_peer"), which)
            self._metadata = None
            self.stream = stream_or_grant

    def wait(self, layer, timeout=None):
        """Returns once ``layer`` is in the pool (GIL released). Raises TimeoutError,
        PeerLostError, CancelledError (the sender cancelled, cancel(), or the pool closed)."""
        self._live.wait(int(layer), timeout_ms(timeout))

    def cancel(self, reason=""):
        """Ends the request here: its grant is closed and every wait of the stream, on any
        thread, ends with CancelledError and ``reason``. Idempotent."""
        self._live.cancel(reason_text(reason))

    @property
    def grant_metadata(self):
        """What the sender uses: the grant's metadata (InvalidArgumentError without a grant)."""
        if self._metadata is None:
            self._live.grant_metadata()  # raises
        return self._metadata


__all__ = ["LayerReceiver", "LayerSender", "layer_tag"]
