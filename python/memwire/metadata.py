"""RdmaMetadata: what a passive operation hands out, as JSON, checked strictly on the way in."""

import json

from . import _memwire
from .errors import InvalidMetadataError
from .types import Device, OperationKind


def metadata_field(key, doc=None):
    """A read-only property: the metadata's field ``key`` as the native object gives it."""
    return property(lambda self: self._field(key), doc=doc)


class JsonMetadata:
    """What RdmaMetadata and PoolMetadata share: a native object whose JSON text and fields are
    read once, made only by ``from_json`` (text, bytes or a dict), which is strict
    (InvalidMetadataError)."""

    __slots__ = ("_native", "_fields", "_json")
    _native_type = None  # the _memwire class behind it
    _what = "metadata"  # how errors name it

    def __init__(self, native):
        if not isinstance(native, self._native_type):
            raise InvalidMetadataError(f"use {type(self).__name__}.from_json(text)")
        self._native = native
        self._fields = None
        self._json = None

    @classmethod
    def from_json(cls, text):
        if isinstance(text, (bytes, bytearray, memoryview)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidMetadataError(f"{cls._what} is not UTF-8") from None
        if isinstance(text, dict):
            text = json.dumps(text)
        if not isinstance(text, str):
            raise InvalidMetadataError(f"{cls._what} must be JSON text, not {type(text).__name__}")
        return cls(cls._native_type.from_json(text))

    @classmethod
    def coerce(cls, value):
        """An instance, JSON text/bytes or a dict -> an instance."""
        return value if isinstance(value, cls) else cls.from_json(value)

    def to_json(self):
        if self._json is None:
            self._json = self._native.to_json()
        return self._json

    def to_dict(self):
        return json.loads(self.to_json())

    def _field(self, key):
        if self._fields is None:
            self._fields = self._native.fields()
        return self._fields[key]

    connector = metadata_field("connector", "The owner's connector name.")

    def __eq__(self, other):
        return isinstance(other, type(self)) and self._native == other._native

    __hash__ = None

    def __str__(self):
        return self.to_json()


class RdmaMetadata(JsonMetadata):
    """nixl_connect's field names (descriptors, notification_key, operation_kind) plus memwire's
    endpoint, token and expiry. ``RdmaMetadata.from_json(text)`` rejects anything malformed
    (InvalidMetadataError); ``to_json()`` gives the text to hand over a sideband. The
    pydantic-style names nixl_connect users call (``model_dump_json``, ``model_validate_json``)
    work too."""

    __slots__ = ()
    _native_type = _memwire.Metadata

    @classmethod
    def model_validate_json(cls, text):
        return cls.from_json(text)

    @classmethod
    def model_validate(cls, value):
        return cls.coerce(value)

    model_dump_json = JsonMetadata.to_json
    model_dump = JsonMetadata.to_dict

    @property
    def descriptors(self):
        return [
            {"device": Device(d["device"]), "ptr": d["ptr"], "size": d["size"]}
            for d in self._field("descriptors")
        ]

    notification_key = metadata_field("notification_key")

    @property
    def operation_kind(self):
        return OperationKind(self._field("operation_kind"))

    expires_at_ms = metadata_field("expires_at_ms")

    @property
    def total_size(self):
        return sum(d["size"] for d in self._field("descriptors"))

    def __repr__(self):
        return (
            f"RdmaMetadata(kind={self.operation_kind.name}, descriptors={len(self._field('descriptors'))}, "
            f"bytes={self.total_size}, connector='{self.connector}')"
        )
