"""The API's rules (README, "The API's rules") in Python: every wait takes a timeout and raises
a MemwireError for anything but what it waited for; work in flight ends with cancel(reason),
held things with close(reason); the reason reaches the waits the end interrupts. And the names
nixl_connect's drop-in keeps."""

import asyncio
import inspect
import threading

import pytest

import memwire
from memwire.layers import LayerReceiver, LayerSender
from memwire.sideband import Lease

BLOCK = 1024


def run(coroutine):
    return asyncio.run(coroutine)


WAITS = [
    (memwire.ReadOperation, "wait_for_completion"),
    (memwire.ReadOperation, "wait"),
    (memwire.BlockTransfer, "wait_for_completion"),
    (memwire.Pool, "next_notification"),
    (memwire.Pool, "wait_for_tag"),
    (memwire.Pool, "notification"),
    (memwire.Pool, "tag"),
    (LayerReceiver, "wait"),
    (LayerSender, "finish"),
    (Lease, "wait"),
]


@pytest.mark.parametrize("cls, name", WAITS, ids=[f"{c.__name__}.{n}" for c, n in WAITS])
def test_every_wait_takes_a_timeout(cls, name):
    assert "timeout" in inspect.signature(getattr(cls, name)).parameters


ENDINGS = [
    (memwire.ReadableOperation, "cancel"),
    (memwire.WriteOperation, "cancel"),
    (memwire.BlockTransfer, "cancel"),
    (LayerSender, "cancel"),
    (LayerReceiver, "cancel"),
    (memwire.Pool, "close"),
    (memwire.BlockGrant, "close"),
    (Lease, "close"),
]


@pytest.mark.parametrize("cls, name", ENDINGS, ids=[f"{c.__name__}.{n}" for c, n in ENDINGS])
def test_every_ending_call_takes_an_optional_reason(cls, name):
    reason = inspect.signature(getattr(cls, name)).parameters.get("reason")
    assert reason is not None and reason.default == ""


def test_the_old_ending_names_are_gone():
    assert not hasattr(memwire.BlockGrant, "release")
    assert not hasattr(memwire.BlockGrant, "released")
    assert not hasattr(LayerReceiver, "abort")
    assert not hasattr(Lease, "release")


def test_the_drop_in_keeps_nixl_connects_names():
    for name in ("Connector", "Descriptor", "Device", "DeviceKind", "OperationStatus", "RdmaMetadata",
                 "ReadableOperation", "WritableOperation", "ReadOperation", "WriteOperation"):
        assert hasattr(memwire, name), name
    connector = inspect.signature(memwire.Connector).parameters
    assert {"worker_id", "runtime", "namespace"} <= set(connector)
    for name in ("initialize", "create_readable", "create_writable", "begin_read", "begin_write",
                 "name", "hostname", "is_cuda_available"):
        assert hasattr(memwire.Connector, name), name
    for cls in (memwire.ReadableOperation, memwire.WritableOperation, memwire.ReadOperation,
                memwire.WriteOperation):
        for name in ("status", "cancel", "wait_for_completion", "__enter__", "__aenter__"):
            assert hasattr(cls, name), (cls.__name__, name)
        # Called as nixl_connect's code calls it: no timeout.
        assert inspect.signature(cls.wait_for_completion).parameters["timeout"].default is None
    assert "hex_encode" in inspect.signature(memwire.ReadableOperation.metadata).parameters
    assert hasattr(memwire.ReadOperation, "results")


def test_a_cancelled_transfers_wait_raises_cancelled_with_the_reason():
    async def main():
        owner, reader = memwire.Connector(transports=["tcp"]), memwire.Connector(transports=["tcp"])
        readable = await owner.create_readable(memwire.Descriptor(bytearray(4096)))
        readable.cancel("the owner shut down")
        assert readable.status == memwire.OperationStatus.CANCELLED
        with pytest.raises(memwire.CancelledError, match="the owner shut down"):
            await readable.wait_for_completion(timeout=5)
        with pytest.raises(memwire.CancelledError, match="the owner shut down"):
            readable.wait(timeout=5)
        readable.cancel("again")  # idempotent: the first reason stays
        with pytest.raises(memwire.CancelledError, match="the owner shut down"):
            await readable.wait_for_completion(timeout=5)
        del reader

    run(main())


def test_closing_a_pool_ends_its_waits_with_the_reason():
    connector = memwire.Connector(transports=["tcp"])
    pool = connector.register_pool((bytearray(4 * BLOCK), BLOCK))
    errors = []

    def wait():
        try:
            pool.wait_for_tag("never", timeout=30)
        except memwire.MemwireError as error:
            errors.append(error)

    waiting = threading.Thread(target=wait)
    waiting.start()
    pool.close("the worker is draining")
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], memwire.CancelledError)
    assert "the worker is draining" in str(errors[0])
    with pytest.raises(memwire.CancelledError, match="the worker is draining"):
        pool.next_notification(timeout=1)

    async def later():
        with pytest.raises(memwire.CancelledError, match="the worker is draining"):
            await pool.tag("never", timeout=1)

    run(later())
    pool.close("again")  # idempotent


def test_closing_a_lease_ends_its_wait_with_the_reason(http_endpoint):
    async def main():
        worker = memwire.Worker(memwire.Connector(), memwire.HttpChannel(http_endpoint.url))
        lease = await worker.publish("rules.lease", memwire.Descriptor(bytearray(64)))
        # Whether its wait began before the close or after, it ends the same way.
        waiting = asyncio.create_task(lease.wait(timeout=30))
        lease.close("the producer stopped")
        with pytest.raises(memwire.CancelledError, match="the producer stopped"):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(memwire.CancelledError):
            await lease.wait(timeout=1)
        lease.close()  # idempotent

    run(main())
