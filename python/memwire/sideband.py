"""Metadata by name: HttpChannel, NatsChannel and Worker (publish, read, serve, request).

Channel calls block in C++ (network round trips). The async methods run them on the channel's
own native threads (never asyncio's default executor, which the application and its DNS lookups
need) and learn of their end as operations do: through the loop's eventfd. Cancelling the
awaiting task stops the call (a wait for a name ends at once over NATS, within about a second
over HTTP). At most ``max_calls`` calls of one channel run at once (default 64); more queue.
"""

import asyncio
import inspect

from . import _memwire
from .descriptor import as_descriptors
from .connector import ReadOperation, WritableOperation
from .errors import NotFoundError
from .metadata import RdmaMetadata
from .pool import PoolMetadata
from .types import OperationStatus
from ._support import EndsWithAsyncBlock, EndsWithBlock, completions_for, read_only, reason_text
from ._support import timeout_ms, timeout_seconds


def _ttl_ms(ttl):
    return 0 if not ttl else timeout_ms(ttl)


#: Sideband calls of one channel that run at once (each on a native thread of the channel's).
DEFAULT_MAX_CALLS = 64


async def _native_call(start, *args):
    """Runs a channel call started by ``start(*args, notifier, token)`` on the channel's threads
    and returns its outcome; cancelling the awaiting task stops it."""
    completions = completions_for(asyncio.get_running_loop())
    notifier, token, done = completions.arm()
    call = start(*args, notifier, token)
    try:
        await done
    except asyncio.CancelledError:
        completions.futures.pop(token, None)
        call.cancel()
        raise
    return call


async def _worker_call(start, *args):
    """Runs a Worker call started by ``start(*args[:-1], notifier, token)`` (the last argument
    owns the memory it uses) and returns it. A cancelled task stops the call and returns only
    once it ended (promptly): until then the native call may touch that memory."""
    *args, owners = args
    completions = completions_for(asyncio.get_running_loop())
    notifier, token, done = completions.arm()
    call = start(*args, notifier, token)
    try:
        await asyncio.shield(done)
    except asyncio.CancelledError:
        call.cancel()
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                pass  # cancelled again: the memory is still in use until the call ended
        del owners
        raise
    return call


class _Channel:
    _native = None

    async def publish(self, name, metadata, ttl=0):
        """Publishes ``metadata`` under ``name`` for ``ttl`` seconds (0: until withdrawn)."""
        md = RdmaMetadata.coerce(metadata)._native
        (await _native_call(self._native.start_publish, name, md, _ttl_ms(ttl))).result()

    async def fetch(self, name, timeout=None):
        """The metadata under ``name``; NotFoundError when nobody published it."""
        return RdmaMetadata((await _native_call(self._native.start_fetch, name, timeout_ms(timeout))).result())

    async def wait_for(self, name, timeout=None):
        """Like fetch, but waits (without polling) until ``name`` is published."""
        return RdmaMetadata((await _native_call(self._native.start_wait_for, name, timeout_ms(timeout))).result())

    async def withdraw(self, name):
        (await _native_call(self._native.start_withdraw, name)).result()

    async def list(self):
        return (await _native_call(self._native.start_list)).result()

    # Pools' metadata (PoolMetadata, a grant's included) by name: a namespace of their own.
    async def publish_pool(self, name, metadata, ttl=0):
        """Publishes a pool's (or a grant's) ``metadata`` under ``name`` for ``ttl`` seconds."""
        native = PoolMetadata.coerce(metadata)._native
        (await _native_call(self._native.start_publish_pool, name, native, _ttl_ms(ttl))).result()

    async def fetch_pool(self, name, timeout=None):
        """The PoolMetadata under ``name``; NotFoundError when nobody published it."""
        return PoolMetadata((await _native_call(self._native.start_fetch_pool, name, timeout_ms(timeout))).result())

    async def wait_for_pool(self, name, timeout=None):
        """Like fetch_pool, but waits (without polling) until ``name`` is published."""
        return PoolMetadata(
            (await _native_call(self._native.start_wait_for_pool, name, timeout_ms(timeout))).result()
        )

    async def withdraw_pool(self, name):
        (await _native_call(self._native.start_withdraw_pool, name)).result()


def _options(given, timeouts):
    """The non-None keyword options as the native side names them (timeouts in ms)."""
    options = {}
    for key, value in given.items():
        if value is None:
            continue
        if key in timeouts:
            options[key + "_ms"] = timeout_ms(value)
        else:
            options[key] = value
    return options


def _max_calls(value):
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 4096:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"max_calls must be 1..4096, not {value!r}")
    return value


class HttpChannel(_Channel):
    """Names over HTTP: a memwire-registry or an HttpEndpoint (``url`` like http://host:port or
    https://...). ``ca_file`` trusts that CA bundle too; ``verify_peer=False`` skips the server's
    certificate check (tests only); ``user``/``password``: basic auth for a proxy in front."""

    def __init__(
        self,
        url,
        *,
        token="",
        user=None,
        password=None,
        ca_file=None,
        verify_peer=None,
        connect_timeout=None,
        request_timeout=None,
        max_retries=None,
        max_calls=DEFAULT_MAX_CALLS,
    ):
        self.url = url
        given = dict(url=url, token=token, user=user, password=password, ca_file=ca_file,
                     verify_peer=verify_peer, connect_timeout=connect_timeout,
                     request_timeout=request_timeout, max_retries=max_retries)
        self._native = _memwire.http_channel(
            _options(given, ("connect_timeout", "request_timeout")), _max_calls(max_calls)
        )


class NatsChannel(_Channel):
    """Names over NATS (core request/reply + a JetStream KV registry). Connects at once."""

    def __init__(
        self,
        servers="nats://127.0.0.1:4222",
        *,
        user=None,
        password=None,
        token=None,
        nkey_public=None,
        nkey_seed_file=None,
        creds_file=None,
        tls=None,
        ca_file=None,
        cert_file=None,
        key_file=None,
        subject_prefix=None,
        kv_bucket=None,
        inbox_prefix=None,
        kv_replicas=None,
        kv_max_age=None,
        connection_name=None,
        connect_timeout=None,
        request_timeout=None,
        max_reconnect=None,
        max_calls=DEFAULT_MAX_CALLS,
    ):
        """Credentials: at most one of user/password, token, nkey_public + nkey_seed_file, or
        creds_file. TLS: ``tls=True``, a ``tls://`` URL or any of ca_file, cert_file + key_file
        (mutual TLS). ``kv_replicas`` (1..5; default one per server of the cluster, up to 3) and
        ``kv_max_age`` (seconds) apply when this
        channel creates the KV bucket. ``inbox_prefix``: where replies to this client come
        (default ``_INBOX_<user>``, or ``_INBOX`` without a user)."""
        if isinstance(servers, str):
            servers = [servers]
        self.servers = list(servers)
        given = dict(servers=self.servers, user=user, password=password, token=token,
                     nkey_public=nkey_public, nkey_seed_file=nkey_seed_file, creds_file=creds_file,
                     tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file,
                     subject_prefix=subject_prefix or None, kv_bucket=kv_bucket or None,
                     inbox_prefix=inbox_prefix or None,
                     kv_replicas=kv_replicas, kv_max_age=kv_max_age, connection_name=connection_name,
                     connect_timeout=connect_timeout, request_timeout=request_timeout,
                     max_reconnect=max_reconnect)
        self._native = _memwire.nats_channel(
            _options(given, ("connect_timeout", "request_timeout", "kv_max_age")), _max_calls(max_calls)
        )


class HttpEndpoint(EndsWithBlock):
    """The HTTP metadata endpoint, embedded in this process (memwire-registry runs it alone)."""

    _end_of_block = "stop"

    def __init__(self, bind_address="127.0.0.1", port=0, *, token=""):
        self._native = _memwire.HttpEndpoint(bind_address, port, token)
        self._native.start()

    url = read_only("_native.url")
    port = read_only("_native.port")

    def stop(self):
        self._native.stop()


class Lease(EndsWithAsyncBlock):
    """Memory published under a name. Ending it (``close(reason="")``, leaving ``async with``,
    or dropping it) withdraws the name and revokes remote access; ``await lease.wait()``
    returns once a reader read it."""

    def __init__(self, worker, native, descriptors):
        self._worker = worker
        self._native = native
        self._name = native.name  # kept after close()
        self._descriptors = descriptors
        self._loop = None
        self._done = None

    @property
    def name(self):
        return self._name

    @property
    def status(self):
        return OperationStatus(self._native.status())

    def metadata(self):
        return RdmaMetadata(self._native.metadata())

    async def wait(self, timeout=None):
        """Waits until a reader has read it: returns COMPLETE; raises like wait_for_completion
        (CancelledError once the lease was closed)."""
        seconds = timeout_seconds(timeout)
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            completions = completions_for(loop)
            notifier, token, done = completions.arm()
            try:
                self._native.notify_via(notifier, token)  # CancelledError once closed
            except BaseException:
                completions.futures.pop(token, None)
                raise
            self._loop, self._done = loop, done
        try:
            await asyncio.wait_for(asyncio.shield(self._done), seconds)
        except asyncio.TimeoutError:
            from .errors import TimeoutError

            raise TimeoutError(f"lease '{self.name}' not read within {seconds:g} s") from None
        return OperationStatus(self._native.wait(1))

    wait_for_completion = wait

    def republish(self, local_descriptors, ttl=0):
        """Publishes ``local_descriptors`` under this lease's name in place of its memory (whose
        remote access ends), without a moment in which the name is unknown: to serve a name
        again after each read. The lease's wait() then waits for a read of the new memory.
        A short blocking call (one registry round trip, GIL released)."""
        descriptors = as_descriptors(local_descriptors, writable_target=False)
        self._worker._native.republish(self._native, [d._spec() for d in descriptors], _ttl_ms(ttl), descriptors)
        self._descriptors = descriptors
        self._loop = None  # the next wait() arms on the new operation

    def close(self, reason=""):
        """Withdraws the name and revokes remote access now (C++'s ``Lease::close(reason)``); a
        wait in progress ends with CancelledError carrying ``reason``. Idempotent."""
        self._native.close(reason_text(reason))


class Subscription(EndsWithAsyncBlock):
    """A serve() registration; close() (or leaving ``with``) ends it."""

    def __init__(self, native, handler):
        self._native = native
        self._handler = handler

    def close(self):
        self._native.close()


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
        call = await _native_call(self._native.start_publish, name, specs, _ttl_ms(ttl))
        return Lease(self, self._native.lease_of(call, descriptors), descriptors)

    async def read(self, name, local_descriptors, timeout=None, *, wait=False):
        """Reads the memory published under ``name`` into local memory and returns the
        completed ReadOperation. ``wait=True`` waits for the name to be published.
        ``timeout`` bounds the lookup and the transfer together. Cancelling the awaiting task
        stops the read (C++ ``Worker::read`` with a stop token); it ends once nothing touches
        the memory any more."""
        descriptors = as_descriptors(local_descriptors, writable_target=True)
        call = await _worker_call(self._native.start_read, name, [d._spec() for d in descriptors],
                                  timeout_ms(timeout), bool(wait), descriptors)
        native = self._native.operation_of(call, descriptors)
        return ReadOperation(self.connector, native, descriptors, asyncio.get_running_loop())

    async def request(self, name, local_descriptors, timeout=None, *, wait=False):
        """Asks the owner of ``name`` to write it into local memory; returns the completed
        WritableOperation. A killed owner ends it at once with PeerLostError. ``wait=True``
        waits (within ``timeout``) for a server of ``name`` to appear instead of raising
        NotFoundError at once: it asks again with a backoff (50 ms doubling to 1 s).
        Cancelling the awaiting task stops the request and revokes the owner's access."""
        if not wait:
            return await self._request(name, local_descriptors, timeout)
        seconds = timeout_seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        backoff = 0.05
        while True:
            try:
                return await self._request(name, local_descriptors, max(0.001, deadline - loop.time()))
            except NotFoundError:
                left = deadline - loop.time()
                if left <= backoff:
                    raise
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _request(self, name, local_descriptors, timeout):
        descriptors = as_descriptors(local_descriptors, writable_target=True)
        call = await _worker_call(self._native.start_request, name, [d._spec() for d in descriptors],
                                  timeout_ms(timeout), descriptors)
        native = self._native.operation_of(call, descriptors)
        return WritableOperation(self.connector, native, descriptors, asyncio.get_running_loop())

    async def serve(self, prefix, handler, *, write_timeout=30.0):
        """Answers requests for names under ``prefix``: ``handler(name)`` returns what to write
        (a Descriptor, a list of them, or data a Descriptor accepts) or raises (a MemwireError
        keeps its code; anything else reaches the requester as NotFound). The handler may be a
        coroutine function: it then runs on this event loop."""
        loop = asyncio.get_running_loop()
        is_async = inspect.iscoroutinefunction(handler)
        limit = timeout_seconds(write_timeout)

        def serve_one(name):  # on the channel's thread, GIL held
            if is_async:
                data = asyncio.run_coroutine_threadsafe(handler(name), loop).result(limit)
            else:
                data = handler(name)
            descriptors = as_descriptors(data, writable_target=False)
            return ([d._spec() for d in descriptors], descriptors)

        call = await _native_call(self._native.start_serve, prefix, serve_one, timeout_ms(write_timeout))
        return Subscription(self._native.subscription_of(call), serve_one)


__all__ = ["HttpChannel", "NatsChannel", "HttpEndpoint", "Worker", "Lease", "Subscription"]
