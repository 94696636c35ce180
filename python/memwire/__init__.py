"""memwire for Python: nixl_connect's API (``import memwire as connect``) over memwire's C++ core,
with deadlines on every wait, typed errors, failures that reach both sides and data by name.

    connector = memwire.Connector()
    readable = await connector.create_readable(memwire.Descriptor(array))
    text = readable.metadata().to_json()            # hand it over a sideband
    # elsewhere:
    read = await connector.begin_read(memwire.RdmaMetadata.from_json(text), memwire.Descriptor(local))
    await read.wait_for_completion(timeout=5)
"""

import atexit as _atexit

from . import errors
from .errors import *  # noqa: F401,F403
from . import _memwire
from .types import Device, DeviceKind, OperationKind, OperationStatus
from .metadata import RdmaMetadata
from .descriptor import Descriptor, SerializedDescriptor
from .connection import Connection
from .pool import BlockRegion, Notification, Pool, PoolMetadata, TagKinds
from .grant import BlockGrant
from .layers import LayerReceiver, LayerSender, layer_tag
from .connector import (
    DEFAULT_TIMEOUT,
    BlockTransfer,
    Connector,
    ReadableOperation,
    ReadOperation,
    WritableOperation,
    WriteOperation,
)
from .sideband import HttpChannel, HttpEndpoint, Lease, NatsChannel, Subscription, Worker

# After this hook, memwire's threads no longer enter Python (callbacks are dropped), so that
# none of them waits for the GIL while the interpreter finalizes.
_atexit.register(_memwire._close_python_gate)

__version__ = "0.1.0"

__all__ = [
    "Connector",
    "Connection",
    "Descriptor",
    "SerializedDescriptor",
    "Device",
    "DeviceKind",
    "OperationKind",
    "OperationStatus",
    "RdmaMetadata",
    "ReadableOperation",
    "WritableOperation",
    "ReadOperation",
    "WriteOperation",
    "BlockRegion",
    "BlockGrant",
    "LayerReceiver",
    "LayerSender",
    "layer_tag",
    "BlockTransfer",
    "Notification",
    "Pool",
    "PoolMetadata",
    "TagKinds",
    "HttpChannel",
    "NatsChannel",
    "HttpEndpoint",
    "Worker",
    "Lease",
    "Subscription",
    "DEFAULT_TIMEOUT",
] + errors.__all__
