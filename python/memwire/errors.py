"""memwire's exceptions: one class per memwire::ErrorCode, all under MemwireError.

Each also derives from the closest built-in exception (ValueError, TimeoutError, ...), so code
that catches those keeps working. ``error.code`` is the ErrorCode (an IntEnum).
"""

import builtins
import enum


class ErrorCode(enum.IntEnum):
    """memwire::ErrorCode, same values."""

    INVALID_ARGUMENT = 0
    INVALID_METADATA = 1
    PAIRING = 2
    SIZE_MISMATCH = 3
    TIMEOUT = 4
    CANCELLED = 5
    PEER_LOST = 6
    ACCESS_DENIED = 7
    TRANSPORT = 8
    NOT_FOUND = 9
    PROTOCOL = 10
    EXPIRED = 11


class MemwireError(Exception):
    """Base of every memwire error; ``code`` says which."""

    code = None

    def __init__(self, message="", code=None):
        super().__init__(message)
        if code is not None:
            self.code = ErrorCode(code)


class InvalidArgumentError(MemwireError, ValueError):
    code = ErrorCode.INVALID_ARGUMENT


class InvalidMetadataError(MemwireError, ValueError):
    """Metadata that cannot be used. From the native parser, ``field`` is the value's path in
    the document ("descriptors[0].size", "endpoint.connector"; None when the text is wrong as a
    whole) and ``reason`` what is wrong with it (memwire::MetadataError)."""

    code = ErrorCode.INVALID_METADATA
    field = None
    reason = None


class PairingError(MemwireError, ValueError):
    code = ErrorCode.PAIRING


class SizeMismatchError(MemwireError, ValueError):
    code = ErrorCode.SIZE_MISMATCH


class TimeoutError(MemwireError, builtins.TimeoutError):  # noqa: A001 (memwire.TimeoutError)
    code = ErrorCode.TIMEOUT


class CancelledError(MemwireError):
    """The operation was cancelled (by either side). Not asyncio.CancelledError."""

    code = ErrorCode.CANCELLED


class PeerLostError(MemwireError, ConnectionError):
    code = ErrorCode.PEER_LOST


class AccessDeniedError(MemwireError, PermissionError):
    code = ErrorCode.ACCESS_DENIED


class TransportError(MemwireError, ConnectionError):
    code = ErrorCode.TRANSPORT


class NotFoundError(MemwireError, LookupError):
    code = ErrorCode.NOT_FOUND


class ProtocolError(MemwireError):
    code = ErrorCode.PROTOCOL


class ExpiredError(MemwireError):
    code = ErrorCode.EXPIRED


# The native module raises through this table (ErrorCode value -> class).
by_code = {
    int(cls.code): cls
    for cls in (
        InvalidArgumentError,
        InvalidMetadataError,
        PairingError,
        SizeMismatchError,
        TimeoutError,
        CancelledError,
        PeerLostError,
        AccessDeniedError,
        TransportError,
        NotFoundError,
        ProtocolError,
        ExpiredError,
    )
}

__all__ = ["ErrorCode", "MemwireError"] + [cls.__name__ for cls in by_code.values()]
