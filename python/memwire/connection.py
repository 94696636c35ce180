"""Connection: nixl_connect's shared per-connector connection (a NIXL agent there), which
Dynamo's components ask for (``await connector._create_connection()``) to pre-register buffers.

memwire's connector is its own endpoint, so a Connection holds no native resource: it names the
connector and is what ``Descriptor.register_with_connector`` binds a descriptor to.
"""

import json
import threading


class Connection:
    """The one connection of a Connector (``Connector._create_connection()`` returns it)."""

    __slots__ = ("_connector", "_name", "_initialized")

    def __init__(self, connector, number):
        from .connector import Connector

        if not isinstance(connector, Connector):
            raise TypeError("Argument `connector` must be a memwire Connector.")
        if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
            raise ValueError("Argument `number` must be an int greater than 0.")
        self._connector = connector
        self._name = f"{connector.name}-{number}"
        self._initialized = False

    @property
    def connector(self):
        return self._connector

    @property
    def name(self):
        return self._name

    @property
    def metadata(self):
        """What a peer needs to know of this side, as bytes (a NIXL agent's metadata there):
        memwire's connector name, host and transports as JSON. Operations' metadata carries
        the same in its endpoint; nothing needs this to move bytes."""
        connector = self._connector
        return json.dumps({"connector": connector.name, "host": connector.hostname,
                           "transports": list(connector.transports)}).encode("utf-8")

    async def initialize(self):
        """Nothing to do (as in nixl_connect, where it is a no-op too)."""
        self._initialized = True

    def __repr__(self):
        return f"Connection(is_initialized={self._initialized}, name='{self._name}')"

    def __str__(self):
        return self._name


class SharedConnection:
    """Makes a connector's one Connection on first use, from any thread or event loop (Dynamo
    calls ``_create_connection`` through ``asyncio.run`` on a worker thread)."""

    __slots__ = ("_lock", "_connection")

    def __init__(self):
        self._lock = threading.Lock()
        self._connection = None

    def get(self, connector):
        with self._lock:
            if self._connection is None:
                self._connection = Connection(connector, 1)
                self._connection._initialized = True
            return self._connection
