"""Request grants (C++'s ``memwire::BlockGrant``): one peer's access to some blocks of a pool for
one request, until a lease ends.

    with pool.grant("prefill-0", "req-17", blocks, access="write", lease=30) as grant:
        send_to_prefill(grant.metadata.to_json())   # the only key to those blocks for req-17
        ...
    # left: closed ("blocks released by the owner for request req-17")

The owner (tcp, shm) or the NIC (verbs) refuses a transfer outside the blocks, after close()
or after the lease, before any byte lands. Dropping the grant closes it too.
"""

from ._support import EndsWithBlock, reason_text
from .errors import InvalidArgumentError
from .pool import PoolMetadata, _lease_ms

_ACCESS = {"read": 1, "write": 2, "read_write": 3, "readwrite": 3, "rw": 3}


def access_code(access):
    """"read", "write" or "read_write" -> C++'s memwire::Access value."""
    code = _ACCESS.get(access) if isinstance(access, str) else None
    if code is None:
        raise InvalidArgumentError(f"access is 'read', 'write' or 'read_write', not {access!r}")
    return code


class BlockGrant(EndsWithBlock):
    """What ``Pool.grant`` returns. ``metadata`` goes to the peer; ``close(reason)`` ends the
    grant (idempotent). Given to a ``LayerReceiver``, the grant moves there: the receiver's
    ``cancel()`` closes it."""

    __slots__ = ("_native", "_metadata")

    def __init__(self, native):
        self._native = native
        self._metadata = None

    @property
    def metadata(self):
        """PoolMetadata with this grant's own token and its scope (request, access, blocks)."""
        if self._metadata is None:
            self._metadata = PoolMetadata(self._native.metadata)
        return self._metadata

    @property
    def peer(self):
        return self._native.peer.decode("utf-8", "surrogateescape")

    @property
    def request(self):
        return self._native.request.decode("utf-8", "surrogateescape")

    @property
    def expires_in(self):
        """Seconds until the lease ends (negative once it has); None once held by a receiver."""
        return self._native.expires_in

    @property
    def renew_limit_in(self):
        """Seconds until the latest end ``renew`` may give the lease (Pool.grant's max_lease)."""
        return self._native.renew_limit_in

    def renew(self, extension):
        """A heartbeat: the lease now ends ``extension`` seconds from now, never past
        ``renew_limit_in`` and never earlier than it did; returns the seconds left. A lease
        that ended stays ended (ExpiredError, even before ``expired()`` was called); a closed
        grant raises CancelledError."""
        return self._native.renew(_lease_ms(extension))

    @property
    def closed(self):
        """True once closed, or once moved into a LayerReceiver (held_by_receiver): this
        handle no longer holds it."""
        return self._native.closed

    @property
    def held_by_receiver(self):
        """True once given to a LayerReceiver, whose cancel() (or close) closes it."""
        return self._native.held_by_receiver

    def close(self, reason=""):
        """Ends the grant: its token is refused from now on ("blocks released by the owner for
        request X: reason"), requests under way finish landing first, and waits for its open
        transfers' tags end with CancelledError. Idempotent."""
        self._native.close(reason_text(reason))

    def expired(self):
        """False before the lease's end; after it, ends the grant as close() does (its peer
        hears ExpiredError) and returns True once the requests admitted before the end have
        landed: from then on no byte lands under the grant (the lease's end as a fence)."""
        return self._native.expired()

    def __repr__(self):
        state = "closed" if self.closed else "live"
        return f"<BlockGrant {self.peer!r} request={self.request!r} {state}>"


__all__ = ["BlockGrant"]
