"""The channel options the C++ side has reach it from Python (TLS, credentials, KV replicas,
CA file), a lease can be republished, and request() can wait for a server to appear."""

import asyncio
import uuid

import pytest

import memwire


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_nats_options_reach_the_connection(nats_url):
    # Each is refused by a plain single server: proof that the option was applied.
    with pytest.raises(memwire.MemwireError):
        memwire.NatsChannel(nats_url, tls=True, connect_timeout=2)
    with pytest.raises(memwire.MemwireError, match="creds|credentials|No such file|not found|open"):
        memwire.NatsChannel(nats_url, creds_file="/nonexistent/user.creds", connect_timeout=2)
    with pytest.raises(memwire.MemwireError):
        memwire.NatsChannel(nats_url, kv_bucket=unique("replicas"), kv_replicas=3, connect_timeout=2)
    channel = memwire.NatsChannel(nats_url, kv_bucket=unique("one"), kv_replicas=1, kv_max_age=60,
                                  connection_name="pytest", max_reconnect=5)
    asyncio.run(channel.list())
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.NatsChannel(nats_url, max_calls=0)
    # inbox_prefix reaches the connection: a wildcard is refused, a plain prefix works.
    with pytest.raises(memwire.InvalidArgumentError, match="inbox_prefix"):
        memwire.NatsChannel(nats_url, inbox_prefix="_INBOX.>")
    own_inbox = memwire.NatsChannel(nats_url, kv_bucket=unique("inbox"), kv_replicas=1,
                                    inbox_prefix="_INBOX_pytest")
    asyncio.run(own_inbox.list())


def test_http_options_reach_the_client(http_endpoint):
    channel = memwire.HttpChannel(http_endpoint.url, ca_file="/nonexistent/ca.pem", verify_peer=True,
                                  max_retries=1, request_timeout=5)
    asyncio.run(channel.list())  # plain http: the CA file is not needed
    https = memwire.HttpChannel(http_endpoint.url.replace("http://", "https://"), ca_file="/nonexistent/ca.pem",
                                max_retries=0, connect_timeout=2, request_timeout=2)
    with pytest.raises(memwire.MemwireError):
        asyncio.run(https.list())


def test_a_lease_is_republished_without_a_gap(http_endpoint):
    async def main():
        owner = memwire.Worker(memwire.Connector(), memwire.HttpChannel(http_endpoint.url))
        reader = memwire.Worker(memwire.Connector(), memwire.HttpChannel(http_endpoint.url))
        name = unique("py.again")
        async with await owner.publish(name, memwire.Descriptor(bytearray(b"1" * 32))) as lease:
            target = bytearray(32)
            await reader.read(name, memwire.Descriptor(target), timeout=10)
            assert target == b"1" * 32
            await lease.wait(timeout=10)
            lease.republish(memwire.Descriptor(bytearray(b"2" * 32)))
            await reader.read(name, memwire.Descriptor(target), timeout=10)
            assert target == b"2" * 32
            assert await lease.wait(timeout=10) == memwire.OperationStatus.COMPLETE

    asyncio.run(main())


def test_request_can_wait_for_a_server_to_appear(http_endpoint):
    async def main():
        owner = memwire.Worker(memwire.Connector(), memwire.HttpChannel(http_endpoint.url))
        asker = memwire.Worker(memwire.Connector(), memwire.HttpChannel(http_endpoint.url))
        prefix = unique("py.later")
        target = bytearray(16)
        with pytest.raises(memwire.NotFoundError):
            await asker.request(f"{prefix}.x", memwire.Descriptor(target), timeout=5)
        asking = asyncio.create_task(asker.request(f"{prefix}.x", memwire.Descriptor(target), timeout=15, wait=True))
        await asyncio.sleep(0.5)
        async with await owner.serve(prefix, lambda name: bytearray(b"s" * 16)):
            op = await asking
        assert op.status == memwire.OperationStatus.COMPLETE and target == b"s" * 16
        with pytest.raises(memwire.NotFoundError):  # waiting still ends at its deadline
            await asker.request(f"{prefix}.y", memwire.Descriptor(target), timeout=0.5, wait=True)

    asyncio.run(main())
