"""nixl_connect's enums and Device, same names and values."""

import enum

from . import _memwire
from .errors import InvalidArgumentError
from ._support import read_only


class DeviceKind(enum.IntEnum):
    UNSPECIFIED = 0
    HOST = 1
    CUDA = 2

    def __str__(self):
        return {0: "unspecified", 1: "cpu", 2: "cuda"}[int(self)]


class OperationKind(enum.IntEnum):
    UNSPECIFIED = 0
    READ = 1
    WRITE = 2

    def __str__(self):
        return self.name


_SHORT_STATUS = {0: "UNINIT", 1: "INIT", 2: "PROC", 3: "DONE", 4: "STOP", 5: "ERR"}


class OperationStatus(enum.IntEnum):
    """Same values as nixl_connect; COMPLETE, CANCELLED and ERRORED are final."""

    UNINITIALIZED = 0
    INITIALIZED = 1
    IN_PROGRESS = 2
    COMPLETE = 3
    CANCELLED = 4
    ERRORED = 5

    def __str__(self):
        return _SHORT_STATUS[int(self)]

    @property
    def is_final(self):
        return self >= OperationStatus.COMPLETE


class Device:
    """Where a buffer lives: ``Device("cpu")``, ``Device("cuda:1")``, ``Device((DeviceKind.CUDA, 1))``.

    Strings ``cpu``/``host`` and ``cuda[:N]``/``gpu[:N]`` parse; anything else is
    InvalidArgumentError. Printed as ``cpu`` or ``cuda:N``.
    """

    __slots__ = ("_kind", "_id")

    def __init__(self, metadata="cpu", device_id=None):
        if isinstance(metadata, Device):
            kind, ident = metadata.kind, metadata.id
        elif isinstance(metadata, str):
            kind, ident = _memwire.parse_device(metadata)
        elif isinstance(metadata, tuple) and len(metadata) == 2:
            kind, ident = metadata
        elif isinstance(metadata, (DeviceKind, int)):
            kind, ident = metadata, device_id if device_id is not None else 0
        else:
            raise InvalidArgumentError(f"not a device: {metadata!r}")
        kind = DeviceKind(kind)
        if kind == DeviceKind.UNSPECIFIED:
            kind = DeviceKind.HOST
        if not isinstance(ident, int) or ident < 0:
            raise InvalidArgumentError(f"device id must be a non-negative int, not {ident!r}")
        if kind == DeviceKind.HOST and ident != 0:
            raise InvalidArgumentError("the host device has id 0")
        self._kind = kind
        self._id = ident

    kind = read_only("_kind")
    id = read_only("_id")

    def __str__(self):
        return "cpu" if self._kind == DeviceKind.HOST else f"cuda:{self._id}"

    def __repr__(self):
        return f"Device('{self}')"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = Device(other)
            except InvalidArgumentError:
                return False
        return isinstance(other, Device) and (self._kind, self._id) == (other._kind, other._id)

    def __hash__(self):
        return hash((self._kind, self._id))
