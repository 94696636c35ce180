"""RdmaMetadata: what a passive operation hands out, as JSON, checked strictly on the way in."""

import json

from . import _memwire
from .errors import InvalidMetadataError
from .types import Device, OperationKind


class RdmaMetadata:
    """nixl_connect's field names (descriptors, notification_key, operation_kind) plus memwire's
    endpoint, token and expiry. ``RdmaMetadata.from_json(text)`` rejects anything malformed
    (InvalidMetadataError); ``to_json()`` gives the text to hand over a sideband. The
    pydantic-style names nixl_connect users call (``model_dump_json``, ``model_validate_json``)
    work too."""

    __slots__ = ("_native", "_fields", "_json")

    def __init__(self, native):
        if not isinstance(native, _memwire.Metadata):
            raise InvalidMetadataError("use RdmaMetadata.from_json(text)")
        self._native = native
        self._fields = None
        self._json = None

    @classmethod
    def from_json(cls, text):
        if isinstance(text, (bytes, bytearray, memoryview)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidMetadataError("metadata is not UTF-8") from None
        if isinstance(text, dict):
            text = json.dumps(text)
        if not isinstance(text, str):
            raise InvalidMetadataError(f"metadata must be JSON text, not {type(text).__name__}")
        return cls(_memwire.Metadata.from_json(text))

    model_validate_json = from_json

    @classmethod
    def model_validate(cls, value):
        return value if isinstance(value, RdmaMetadata) else cls.from_json(value)

    @classmethod
    def coerce(cls, value):
        """RdmaMetadata, JSON text/bytes or a dict -> RdmaMetadata."""
        return value if isinstance(value, RdmaMetadata) else cls.from_json(value)

    def to_json(self):
        if self._json is None:
            self._json = self._native.to_json()
        return self._json

    model_dump_json = to_json

    def to_dict(self):
        return json.loads(self.to_json())

    model_dump = to_dict

    def _field(self, key):
        if self._fields is None:
            self._fields = self._native.fields()
        return self._fields[key]

    @property
    def descriptors(self):
        return [
            {"device": Device(d["device"]), "ptr": d["ptr"], "size": d["size"]}
            for d in self._field("descriptors")
        ]

    @property
    def notification_key(self):
        return self._field("notification_key")

    @property
    def operation_kind(self):
        return OperationKind(self._field("operation_kind"))

    @property
    def connector(self):
        """The owner's connector name."""
        return self._field("connector")

    @property
    def expires_at_ms(self):
        return self._field("expires_at_ms")

    @property
    def total_size(self):
        return sum(d["size"] for d in self._field("descriptors"))

    def __eq__(self, other):
        return isinstance(other, RdmaMetadata) and self._native == other._native

    __hash__ = None

    def __str__(self):
        return self.to_json()

    def __repr__(self):
        return (
            f"RdmaMetadata(kind={self.operation_kind.name}, descriptors={len(self._field('descriptors'))}, "
            f"bytes={self.total_size}, connector='{self.connector}')"
        )
