"""Metadata by name: HttpChannel, NatsChannel and Worker (publish, read, serve, request).

Channel calls block in C++ (network round trips); the async methods run them on the event
loop's default executor, with the GIL released, and bound them by their timeouts. Transfers
themselves complete through the connector's completion callback, as operations do.
"""

import asyncio
import functools
import inspect

from . import _memwire
from .connector import _completions_for, _timeout_seconds
from .descriptor import as_descriptors
from .errors import MemwireError
from .metadata import RdmaMetadata
from .types import OperationStatus


def _ms(seconds):
    return max(1, int(_timeout_seconds(seconds) * 1000))


def _ttl_ms(ttl):
    return 0 if not ttl else _ms(ttl)


async def _blocking(function, *args):
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(function, *args))


class _Channel:
    _native = None

    async def publish(self, name, metadata, ttl=0):
        """Publishes ``metadata`` under ``name`` for ``ttl`` seconds (0: until withdrawn)."""
        await _blocking(self._native.publish, name, RdmaMetadata.coerce(metadata)._native, _ttl_ms(ttl))

    async def fetch(self, name, timeout=None):
        """The metadata under ``name``; NotFoundError when nobody published it."""
        return RdmaMetadata(await _blocking(self._native.fetch, name, _ms(timeout)))

    async def wait_for(self, name, timeout=None):
        """Like fetch, but waits (without polling) until ``name`` is published."""
        return RdmaMetadata(await _blocking(self._native.wait_for, name, _ms(timeout)))

    async def withdraw(self, name):
        await _blocking(self._native.withdraw, name)

    async def list(self):
        return await _blocking(self._native.list)


class HttpChannel(_Channel):
    """Names over HTTP: a memwire-registry or an HttpEndpoint (``url`` like http://host:port)."""

    def __init__(self, url, *, token="", connect_timeout=None, request_timeout=None):
        self.url = url
        self._native = _memwire.http_channel(
            url,
            token,
            _ms(connect_timeout) if connect_timeout else 0,
            _ms(request_timeout) if request_timeout else 0,
        )


class NatsChannel(_Channel):
    """Names over NATS (core request/reply + a JetStream KV registry). Connects at once."""

    def __init__(
        self,
        servers="nats://127.0.0.1:4222",
        *,
        user="",
        password="",
        token="",
        subject_prefix="",
        kv_bucket="",
        connect_timeout=None,
        request_timeout=None,
        kv_replicas=0,
    ):
        # kv_replicas: copies of the registry buckets this channel creates (1..5); 0 = one per
        # server of the cluster it knows, up to 3.
        if isinstance(servers, str):
            servers = [servers]
        self.servers = list(servers)
        self._native = _memwire.nats_channel(
            self.servers,
            user,
            password,
            token,
            subject_prefix,
            kv_bucket,
            _ms(connect_timeout) if connect_timeout else 0,
            _ms(request_timeout) if request_timeout else 0,
            kv_replicas,
        )


class HttpEndpoint:
    """The HTTP metadata endpoint, embedded in this process (memwire-registry runs it alone)."""

    def __init__(self, bind_address="127.0.0.1", port=0, *, token=""):
        self._native = _memwire.HttpEndpoint(bind_address, port, token)
        self._native.start()

    @property
    def url(self):
        return self._native.url

    @property
    def port(self):
        return self._native.port

    def stop(self):
        self._native.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Lease:
    """Memory published under a name. Ending it (release(), or leaving ``async with``)
    withdraws the name and revokes remote access; ``await lease.wait()`` returns once a reader
    read it."""

    def __init__(self, worker, native, descriptors):
        self._worker = worker
        self._native = native
        self._descriptors = descriptors
        self._loop = None
        self._done = None

    @property
    def name(self):
        return self._native.name

    @property
    def status(self):
        return OperationStatus(self._native.status())

    def metadata(self):
        return RdmaMetadata(self._native.metadata())

    async def wait(self, timeout=None):
        """Waits until a reader has read it: COMPLETE (or CANCELLED); raises like
        wait_for_completion."""
        seconds = _timeout_seconds(timeout)
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            notifier, token, self._done = _completions_for(loop).arm()
            self._native.notify_via(notifier, token)
        try:
            await asyncio.wait_for(asyncio.shield(self._done), seconds)
        except asyncio.TimeoutError:
            from .errors import TimeoutError

            raise TimeoutError(f"lease '{self.name}' not read within {seconds:g} s") from None
        return OperationStatus(self._native.wait(1))

    wait_for_completion = wait

    def release(self):
        self._native.release()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class Subscription:
    """A serve() registration; close() (or leaving ``with``) ends it."""

    def __init__(self, native, handler):
        self._native = native
        self._handler = handler

    def close(self):
        self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()


class Worker:
    """A connector and a channel together: data by name."""

    def __init__(self, connector, channel):
        self.connector = connector
        self.channel = channel
        self._native = _memwire.Worker(connector._native, channel._native)

    async def publish(self, name, local_descriptors, ttl=0):
        """Publishes local memory for remote reads under ``name``; returns the Lease."""
        descriptors = as_descriptors(local_descriptors, writable_target=False)
        specs = [d._spec() for d in descriptors]
        native = await _blocking(self._native.publish, name, specs, _ttl_ms(ttl))
        return Lease(self, native, descriptors)

    async def read(self, name, local_descriptors, timeout=None, *, wait=False):
        """Reads the memory published under ``name`` into local memory and returns the
        completed ReadOperation. ``wait=True`` waits for the name to be published.
        ``timeout`` bounds the lookup and the transfer together."""
        seconds = _timeout_seconds(timeout)
        descriptors = as_descriptors(local_descriptors, writable_target=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        lookup = self.channel._native.wait_for if wait else self.channel._native.fetch
        native_md = await _blocking(lookup, name, _ms(seconds))
        op = self.connector.begin_read(RdmaMetadata(native_md), descriptors)
        try:
            await op.wait_for_completion(max(0.001, deadline - loop.time()))
        except BaseException:
            op._cancel_quietly()
            raise
        return op

    async def request(self, name, local_descriptors, timeout=None):
        """Asks the owner of ``name`` to write it into local memory; returns the completed
        WritableOperation. A killed owner ends it at once with PeerLostError."""
        seconds = _timeout_seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        op = self.connector.create_writable(local_descriptors)
        stop = _memwire.StopSource()

        def on_end(status):  # on a memwire thread: our side failed, stop waiting for a reply
            if status == int(OperationStatus.ERRORED):
                stop.request_stop()

        op._native.notify(on_end)
        md = op.metadata()
        try:
            await _blocking(self.channel._native.request, name, md._native, _ms(seconds), stop)
        except asyncio.CancelledError:
            stop.request_stop()
            op._cancel_quietly()
            raise
        except MemwireError:
            if op.status == OperationStatus.ERRORED:
                op._native.wait(1)  # raises the operation's own failure: it says more
            op._cancel_quietly()
            raise
        await op.wait_for_completion(max(1.0, deadline - loop.time()))
        return op

    async def serve(self, prefix, handler, *, write_timeout=30.0):
        """Answers requests for names under ``prefix``: ``handler(name)`` returns what to write
        (a Descriptor, a list of them, or data a Descriptor accepts) or raises (a MemwireError
        keeps its code; anything else reaches the requester as NotFound). The handler may be a
        coroutine function: it then runs on this event loop."""
        loop = asyncio.get_running_loop()
        is_async = inspect.iscoroutinefunction(handler)
        limit = _timeout_seconds(write_timeout)

        def serve_one(name):  # on the channel's thread, GIL held
            if is_async:
                data = asyncio.run_coroutine_threadsafe(handler(name), loop).result(limit)
            else:
                data = handler(name)
            descriptors = as_descriptors(data, writable_target=False)
            return ([d._spec() for d in descriptors], descriptors)

        native = await _blocking(self._native.serve, prefix, serve_one, _ms(write_timeout))
        return Subscription(native, serve_one)


__all__ = ["HttpChannel", "NatsChannel", "HttpEndpoint", "Worker", "Lease", "Subscription"]
