"""RdmaMetadata: what a passive operation hands out, as JSON, checked strictly on the way in."""

import base64
import binascii
import json

from . import _memwire
from .descriptor import SerializedDescriptor
from .errors import InvalidMetadataError
from .types import OperationKind

#: What starts memwire's ``nixl_metadata`` text: the owner's part of the metadata (endpoint,
#: token, key, expiry) as base64 of its JSON. NIXL's own starts "b64:" (or is hex).
NIXL_METADATA_PREFIX = "memwire:"
#: The metadata document's own bound (RdmaMetadata's from_json refuses more than this).
_MAX_METADATA_BYTES = 1 << 20
# The fields of memwire's document that nixl_connect's RdmaMetadata holds beside nixl_metadata;
# the rest (the owner's part, its operation's key included) travels inside nixl_metadata.
_BESIDE_NIXL_METADATA = ("descriptors", "operation_kind")


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

    def __init__(self, native=None, *, descriptors=None, nixl_metadata=None, notification_key=None,
                 operation_kind=None):
        """``RdmaMetadata.from_json(text)`` reads what an owner handed out. nixl_connect's
        keyword form builds one from its four fields, as Dynamo's media path does:
        ``RdmaMetadata(descriptors=[SerializedDescriptor(...)], nixl_metadata=text,
        notification_key=key, operation_kind=int(OperationKind.READ))``, where ``text`` is an
        owner's ``metadata().nixl_metadata``. The owner's operation is the one its
        nixl_metadata names: a ``notification_key`` given beside it is a label memwire does not
        send (nixl_connect sends it as the completion's text)."""
        if native is not None:
            if any(v is not None for v in (descriptors, nixl_metadata, notification_key, operation_kind)):
                raise InvalidMetadataError("RdmaMetadata takes a native object or nixl_connect's fields, not both")
            super().__init__(native)
            return
        document = _owner_part(nixl_metadata)
        if notification_key is not None and not isinstance(notification_key, str):
            raise InvalidMetadataError("notification_key must be a string")
        if descriptors is None or not isinstance(descriptors, (list, tuple)) or not descriptors:
            raise InvalidMetadataError("descriptors must be a non-empty list of SerializedDescriptor")
        document["descriptors"] = [_descriptor_fields(d) for d in descriptors]
        if operation_kind is None or isinstance(operation_kind, bool) or not isinstance(operation_kind, int):
            raise InvalidMetadataError(f"operation_kind must be an int (1 read, 2 write), not {operation_kind!r}")
        document["operation_kind"] = int(operation_kind)
        super().__init__(self._native_type.from_json(json.dumps(document)))

    @property
    def nixl_metadata(self):
        """The owner's part of the metadata (how to reach it: endpoint, token, the operation's
        key, expiry), as text for nixl_connect's ``nixl_metadata`` field; with ``descriptors``
        and ``operation_kind`` it makes the metadata again (the keyword constructor)."""
        document = json.loads(self.to_json())
        owner = {k: v for k, v in document.items() if k not in _BESIDE_NIXL_METADATA}
        text = json.dumps(owner, separators=(",", ":")).encode("utf-8")
        return NIXL_METADATA_PREFIX + base64.b64encode(text).decode("ascii")

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
        """The owner's descriptors, as nixl_connect gives them: SerializedDescriptor objects
        (``.device``, ``.ptr``, ``.size``; ``d["size"]`` works too)."""
        return [
            SerializedDescriptor(device=str(d["device"]), ptr=d["ptr"], size=d["size"])
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


def _owner_part(text):
    """The owner's part of a metadata document from ``nixl_metadata`` text (a dict), or
    InvalidMetadataError saying why not."""
    if not isinstance(text, str):
        raise InvalidMetadataError(f"nixl_metadata must be text, not {type(text).__name__}")
    if not text.startswith(NIXL_METADATA_PREFIX):
        raise InvalidMetadataError(
            "nixl_metadata is not memwire's (it does not start 'memwire:'): memwire reads only from "
            "memwire owners, not from a NIXL agent"
        )
    encoded = text[len(NIXL_METADATA_PREFIX):]
    if len(encoded) > _MAX_METADATA_BYTES * 4 // 3 + 4:
        raise InvalidMetadataError(f"nixl_metadata is longer than {_MAX_METADATA_BYTES} bytes")
    try:
        owner = json.loads(base64.b64decode(encoded, validate=True).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError) as error:
        raise InvalidMetadataError(f"nixl_metadata is not base64 of JSON: {error}") from None
    if not isinstance(owner, dict):
        raise InvalidMetadataError("nixl_metadata does not hold a JSON object")
    stray = [k for k in owner if k in _BESIDE_NIXL_METADATA]
    if stray:
        raise InvalidMetadataError(f"nixl_metadata must not carry {', '.join(stray)}")
    return owner


def _descriptor_fields(descriptor):
    if isinstance(descriptor, dict):
        try:
            descriptor = SerializedDescriptor(**descriptor)
        except (TypeError, ValueError) as error:
            raise InvalidMetadataError(f"a descriptor: {error}") from None
    if not isinstance(descriptor, SerializedDescriptor):
        raise InvalidMetadataError(f"a descriptor is a SerializedDescriptor, not {type(descriptor).__name__}")
    return descriptor.model_dump()
