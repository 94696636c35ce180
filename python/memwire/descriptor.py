"""Descriptor: a view of memory (ptr, size, device) that keeps its Python owner alive; and
SerializedDescriptor, nixl_connect's description of one descriptor in metadata."""

import json
import logging

from . import _memwire
from .errors import InvalidArgumentError
from .types import Device, DeviceKind
from ._support import read_only


def _is_torch_tensor(data):
    cls = type(data)
    return cls.__module__.startswith("torch") and hasattr(data, "data_ptr")


def _cuda_array(data, device):
    """(ptr, size, device) of an object with ``__cuda_array_interface__`` (CuPy, Numba, ...)."""
    interface = data.__cuda_array_interface__
    if interface.get("strides") is not None:
        raise InvalidArgumentError("a CUDA array descriptor needs a C-contiguous array")
    ptr, _readonly = interface["data"]
    try:
        itemsize = int(interface["typestr"][2:])
    except (KeyError, ValueError):
        raise InvalidArgumentError(f"CUDA array of unknown type {interface.get('typestr')!r}") from None
    size = itemsize
    for extent in interface["shape"]:
        size *= int(extent)
    if device is None:  # CuPy says which device; the driver checks it when the operation starts
        ordinal = getattr(getattr(data, "device", None), "id", 0)
        device = f"cuda:{ordinal}"
    return int(ptr or 0), size, Device(device)


_ADDRESS_LIMIT = (1 << 64) - 1  # ptr + size stays below it (no wrap-around)


class Descriptor:
    """Memory to move, never copied. Accepts, like nixl_connect:

    - a ``torch.Tensor`` (contiguous; its device is the tensor's),
    - an object with ``__cuda_array_interface__`` (a CuPy array, ...; C-contiguous), on the
      device it names (CuPy) or ``device``,
    - ``(ndarray, device)`` with a NumPy array (or anything with the buffer protocol),
    - ``bytes`` (read-only: a source only), ``bytearray``, ``memoryview``, a NumPy array or any
      C-contiguous object with the buffer protocol,
    - ``(ptr, size, device[, owner])``: raw memory; ``owner`` is kept alive with the descriptor.

    The object the memory belongs to stays alive as long as the descriptor and every operation
    that uses it. A bytearray cannot be resized while a descriptor holds it.
    """

    __slots__ = ("_ptr", "_size", "_extent", "_device", "_owner", "_hold", "_readonly", "_spec_cache",
                 "_connection")

    def __init__(self, data, device=None):
        self._connection = None
        self._extent = None  # the bytes the memory has; _size may be set below it (_data_size)
        self._hold = None
        self._readonly = False
        self._owner = data
        if isinstance(data, Descriptor):
            self._ptr, self._size, self._device = data._ptr, data._size, data._device
            self._extent = data._extent
            self._owner, self._hold, self._readonly = data._owner, data._hold, data._readonly
            return
        if isinstance(data, tuple):
            if len(data) == 2:
                array, device = data
                self._from_object(array, device)
                return
            if len(data) in (3, 4):
                ptr, size, dev = data[:3]
                self._owner = data[3] if len(data) == 4 else None
                if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0:
                    raise InvalidArgumentError(f"descriptor pointer must be a positive int, not {ptr!r}")
                if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                    raise InvalidArgumentError(f"descriptor size must be a positive int, not {size!r}")
                if ptr + size > _ADDRESS_LIMIT:
                    raise InvalidArgumentError(
                        f"descriptor (0x{ptr:x}, {size}) runs past the end of the 64-bit address space"
                    )
                self._ptr, self._size, self._device = ptr, size, Device(dev)
                if self._device.kind == DeviceKind.HOST:
                    self._check_host_memory()
                return
            raise InvalidArgumentError("a descriptor tuple is (array, device) or (ptr, size, device[, owner])")
        self._from_object(data, device)

    def _from_object(self, data, device):
        if _is_torch_tensor(data):
            if not data.is_contiguous():
                raise InvalidArgumentError("a tensor descriptor needs a contiguous tensor")
            dev = data.device
            self._device = Device(f"cuda:{dev.index or 0}" if dev.type == "cuda" else "cpu")
            if dev.type not in ("cpu", "cuda"):
                raise InvalidArgumentError(f"tensor on unsupported device {dev}")
            self._ptr = int(data.data_ptr())
            self._size = int(data.numel()) * int(data.element_size())
        elif hasattr(data, "__cuda_array_interface__"):
            self._ptr, self._size, self._device = _cuda_array(data, device)
        else:
            try:
                hold = _memwire.BufferHold(data, True)
            except (BufferError, TypeError, ValueError):
                try:
                    hold = _memwire.BufferHold(data, False)
                except TypeError:
                    raise InvalidArgumentError(
                        f"cannot describe {type(data).__name__}: not a tensor, array or buffer"
                    ) from None
                except (BufferError, ValueError) as error:
                    raise InvalidArgumentError(f"buffer not usable (C-contiguous needed): {error}") from None
            self._hold = hold
            self._readonly = hold.readonly
            self._ptr, self._size = hold.address, hold.size
            self._device = Device(device) if device is not None else Device("cpu")
        if self._size <= 0:
            raise InvalidArgumentError("a descriptor needs at least one byte")

    def _check_host_memory(self):
        # A raw pointer is trusted by no transport: memory that is not there would fault on one
        # of memwire's threads (and kill the process) instead of failing the operation.
        access = _memwire.host_memory_access(self._ptr, self._size)
        if access == 0:
            raise InvalidArgumentError(
                f"descriptor memory 0x{self._ptr:x}+{self._size} is not mapped readable in this process"
            )
        self._readonly = access == 1

    ptr = read_only("_ptr")
    size = read_only("_size")
    device = read_only("_device")
    readonly = read_only(
        "_readonly", "True for memory that may only be a source (bytes, read-only buffers)."
    )
    data = read_only("_owner", "The object the memory belongs to.")

    # nixl_connect's private names, which Dynamo's components use (embedding_transfer,
    # mm_kwargs_transfer): the memory's owner, address and device, and the size to move.
    _data_ref = data
    _data_ptr = ptr
    _data_device = device

    @property
    def _data_size(self):
        return self._size

    @_data_size.setter
    def _data_size(self, size):
        # Dynamo reuses a pre-registered buffer for a smaller tensor by lowering the size to
        # move. Never above the memory the descriptor was made from: the size is what an
        # operation hands to the transports.
        extent = self._extent if self._extent is not None else self._size
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= extent:
            raise InvalidArgumentError(
                f"a descriptor's size is 1 to the {extent} bytes of its memory, not {size!r}"
            )
        self._extent = extent
        self._size = size
        try:
            del self._spec_cache
        except AttributeError:
            pass

    @property
    def metadata(self):
        """This descriptor as metadata describes it (nixl_connect's SerializedDescriptor)."""
        return SerializedDescriptor(device=str(self._device), ptr=self._ptr, size=self._size)

    @staticmethod
    def from_serialized(serialized):
        """A Descriptor of the memory ``serialized`` names, which must be mapped in this
        process (memwire describes no memory it cannot reach: a remote address is refused)."""
        if not isinstance(serialized, SerializedDescriptor):
            raise InvalidArgumentError("from_serialized takes a SerializedDescriptor")
        return serialized.to_descriptor()

    # Registration, as nixl_connect shapes it: a descriptor is bound to one connection until it
    # is deregistered. memwire registers memory per operation, for that operation's life (tcp
    # and shm need no registration; verbs registers at the operation's start), so a bound
    # descriptor moves exactly as an unbound one: these keep nixl_connect's rules and state.

    @property
    def is_registered(self):
        """Whether register_with_connector bound it (and no deregister_with_connector since)."""
        return self._connection is not None

    def register_with_connector(self, connection):
        """Binds the descriptor to ``connection`` (``await connector._create_connection()``).
        Again with the same connection: nothing; with another: RuntimeError, as nixl_connect."""
        from .connection import Connection

        if not isinstance(connection, Connection):
            raise TypeError("register_with_connector takes a Connection (Connector._create_connection())")
        if self._connection is not None:
            if self._connection is not connection:
                raise RuntimeError(
                    f"Descriptor cannot be registered with more than one connection: it is registered "
                    f"with '{self._connection.name}', not '{connection.name}'"
                )
            return
        self._connection = connection

    def deregister_with_connector(self, connection):
        """Unbinds it from ``connection``; RuntimeError for another connection, a warning when
        it is not registered (nixl_connect's rules)."""
        from .connection import Connection

        if not isinstance(connection, Connection):
            raise TypeError("deregister_with_connector takes a Connection")
        if connection is not self._connection and self._connection is not None:
            raise RuntimeError(
                f"Descriptor can only be deregistered from the connection it was registered with "
                f"('{self._connection.name}', not '{connection.name}')"
            )
        if self._connection is None:
            logging.getLogger(__name__).warning("%r is not registered: nothing to deregister", self)
            return
        self._connection = None

    def register_memory(self, connector=None):
        """No-op (nixl_connect's older name): memwire registers per operation."""

    def _spec(self):
        try:
            return self._spec_cache
        except AttributeError:
            self._spec_cache = _memwire.NativeDescriptor(self._ptr, self._size, str(self._device))
            return self._spec_cache

    def __repr__(self):
        return f"Descriptor(ptr=0x{self._ptr:x}, size={self._size}, device='{self._device}')"


def as_descriptors(local, writable_target):
    """A Descriptor, a list of them, or data a Descriptor accepts -> list[Descriptor]."""
    if type(local) is list and local and all(type(d) is Descriptor for d in local):
        items = local  # the common case, kept cheap: a list of descriptors
        if writable_target and any(d._readonly for d in items):
            raise InvalidArgumentError(
                "read-only memory (bytes?) cannot receive data: use a bytearray or array"
            )
        if len(items) > 1 and len({d._device.kind for d in items}) > 1:
            raise InvalidArgumentError("all descriptors of one side must share one memory kind")
        return list(items)
    if isinstance(local, (list, tuple)) and not (
        isinstance(local, tuple) and len(local) in (2, 3, 4) and not isinstance(local[0], Descriptor)
    ):
        items = [d if isinstance(d, Descriptor) else Descriptor(d) for d in local]
    else:
        items = [local if isinstance(local, Descriptor) else Descriptor(local)]
    if not items:
        raise InvalidArgumentError("at least one descriptor is needed")
    if writable_target:
        for d in items:
            if d.readonly:
                raise InvalidArgumentError(
                    "read-only memory (bytes?) cannot receive data: use a bytearray or array"
                )
    kinds = {d.device.kind for d in items}
    if len(kinds) > 1:
        raise InvalidArgumentError("all descriptors of one side must share one memory kind")
    return items


class SerializedDescriptor:
    """One descriptor as metadata describes it (nixl_connect's SerializedDescriptor): ``device``
    ("cpu", "cuda:N"), ``ptr`` (the owner's address, non-zero) and ``size`` (bytes, >= 0).
    Immutable; compares by value. ``d["size"]`` works too (memwire's older dict form)."""

    __slots__ = ("_device", "_ptr", "_size")

    def __init__(self, device="cpu", ptr=0, size=0):
        if not isinstance(device, str):
            raise TypeError("Argument `device` must be `str`.")
        device = device.strip().lower()
        try:
            device = str(Device(device))
        except (InvalidArgumentError, ValueError) as error:
            raise ValueError(f"Argument `device` must be 'cpu' or 'cuda:<id>', not {device!r}: {error}") from None
        if not isinstance(ptr, int) or isinstance(ptr, bool) or not 0 < ptr <= _ADDRESS_LIMIT:
            raise ValueError(f"Argument `ptr` must be a non-zero 64-bit address, not {ptr!r}")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= _ADDRESS_LIMIT - ptr:
            raise ValueError(f"Argument `size` must be bytes >= 0 within the address space, not {size!r}")
        self._device, self._ptr, self._size = device, ptr, size

    device = read_only("_device")
    ptr = read_only("_ptr")
    size = read_only("_size")

    def to_descriptor(self):
        """A Descriptor of this memory, which must be mapped in this process (see
        Descriptor.from_serialized)."""
        return Descriptor((self._ptr, self._size, self._device))

    def model_dump(self):
        return {"device": self._device, "ptr": self._ptr, "size": self._size}

    def model_dump_json(self):
        return json.dumps(self.model_dump(), separators=(",", ":"))

    @classmethod
    def model_validate(cls, value):
        """An instance, or a dict of device, ptr and size -> an instance (ValueError else)."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict) or not set(value) <= {"device", "ptr", "size"}:
            raise ValueError(f"a SerializedDescriptor is a dict of device, ptr and size, not {value!r}")
        return cls(**value)

    @classmethod
    def model_validate_json(cls, text):
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as error:
            raise ValueError(f"a SerializedDescriptor is JSON: {error}") from None
        return cls.model_validate(value)

    def __getitem__(self, key):
        if key not in ("device", "ptr", "size"):
            raise KeyError(key)
        return getattr(self, key)

    def __eq__(self, other):
        return isinstance(other, SerializedDescriptor) and self.model_dump() == other.model_dump()

    def __hash__(self):
        return hash((self._device, self._ptr, self._size))

    def __repr__(self):
        return f"SerializedDescriptor(device='{self._device}', ptr=0x{self._ptr:x}, size={self._size})"


__all__ = ["Descriptor", "DeviceKind", "SerializedDescriptor"]
