"""Descriptor: a view of memory (ptr, size, device) that keeps its Python owner alive."""

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

    __slots__ = ("_ptr", "_size", "_device", "_owner", "_hold", "_readonly", "_spec_cache")

    def __init__(self, data, device=None):
        self._hold = None
        self._readonly = False
        self._owner = data
        if isinstance(data, Descriptor):
            self._ptr, self._size, self._device = data._ptr, data._size, data._device
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

    @property
    def is_registered(self):
        # memwire registers memory per operation, for that operation's life only.
        return False

    def register_memory(self, connector=None):
        """No-op (nixl_connect compatibility): memwire registers per operation."""

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


__all__ = ["Descriptor", "DeviceKind"]
