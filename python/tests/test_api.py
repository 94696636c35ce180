"""One process: the nixl_connect surface, memwire's errors, timeouts and asyncio cancellation."""

import asyncio
import functools
import gc
import json
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import memwire


def run(coro):
    return asyncio.run(coro)


def in_a_loop(test):
    """Runs the coroutine function `test` in a fresh event loop: a plain test to pytest."""

    @functools.wraps(test)
    def run_it(*args, **kwargs):
        return run(test(*args, **kwargs))

    return run_it


# --- enums, Device, Descriptor, metadata --------------------------------------------------


def test_enum_values_and_short_strings_are_nixl_connects():
    S = memwire.OperationStatus
    assert [int(s) for s in (S.UNINITIALIZED, S.INITIALIZED, S.IN_PROGRESS, S.COMPLETE, S.CANCELLED, S.ERRORED)] == [0, 1, 2, 3, 4, 5]
    assert [str(s) for s in (S.INITIALIZED, S.IN_PROGRESS, S.COMPLETE, S.CANCELLED, S.ERRORED)] == ["INIT", "PROC", "DONE", "STOP", "ERR"]
    assert (int(memwire.OperationKind.READ), int(memwire.OperationKind.WRITE)) == (1, 2)
    assert (int(memwire.DeviceKind.HOST), int(memwire.DeviceKind.CUDA)) == (1, 2)


def test_device_parsing_and_printing():
    assert str(memwire.Device("cpu")) == "cpu" and memwire.Device("host") == memwire.Device("cpu")
    assert memwire.Device("gpu:3").kind == memwire.DeviceKind.CUDA and memwire.Device("gpu:3").id == 3
    assert str(memwire.Device("cuda")) == "cuda:0"
    assert str(memwire.Device((memwire.DeviceKind.CUDA, 1))) == "cuda:1"
    for bad in ("tpu", "cuda:x", "", "cpu:1"):
        with pytest.raises(memwire.InvalidArgumentError):
            memwire.Device(bad)


def test_descriptor_forms():
    array = np.arange(16, dtype=np.float32)
    d = memwire.Descriptor(array)
    assert (d.ptr, d.size, str(d.device)) == (array.ctypes.data, 64, "cpu")
    d = memwire.Descriptor((array, "cpu"))
    assert d.size == 64
    buf = bytearray(10)
    assert memwire.Descriptor(buf).size == 10 and not memwire.Descriptor(buf).readonly
    assert memwire.Descriptor(memoryview(buf)[2:]).size == 8
    assert memwire.Descriptor(b"abc").readonly
    raw = memwire.Descriptor((array.ctypes.data, 64, "cpu", array))
    assert raw.data is array and raw.ptr == array.ctypes.data


def test_descriptor_refuses_nonsense():
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor(np.arange(16)[::2])  # not contiguous
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor(bytearray())  # empty
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor((0, 10, "cpu"))  # null pointer
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor((4096, -1, "cpu"))
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor(object())


def test_a_descriptor_keeps_its_owner_alive_and_pinned():
    buf = bytearray(b"x" * 4096)
    d = memwire.Descriptor(buf)
    with pytest.raises(BufferError):
        buf.extend(b"more")  # cannot move while described
    array = np.ones(1 << 16, dtype=np.uint8)
    ref = weakref.ref(array)
    d = memwire.Descriptor(array)
    del array
    gc.collect()
    assert ref() is not None  # the descriptor holds it
    del d
    gc.collect()
    assert ref() is None


def test_torch_cpu_tensor_descriptor():
    torch = pytest.importorskip("torch")
    t = torch.arange(100, dtype=torch.float64)
    d = memwire.Descriptor(t)
    assert (d.ptr, d.size, str(d.device)) == (t.data_ptr(), 800, "cpu")
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor(t.view(10, 10).t())  # not contiguous


def _libcuda_loads():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_cuda_array_interface_descriptor():
    # What CuPy (and Numba, ...) expose; no GPU needed to describe one.
    class CudaArray:
        class device:
            id = 1

        __cuda_array_interface__ = {"shape": (4, 8), "typestr": "<f4", "data": (0x7000, False),
                                    "version": 3, "strides": None}

    d = memwire.Descriptor(CudaArray())
    assert (d.ptr, d.size, str(d.device)) == (0x7000, 128, "cuda:1")
    CudaArray.__cuda_array_interface__ = dict(CudaArray.__cuda_array_interface__, strides=(4, 16))
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor(CudaArray())


@in_a_loop
async def test_metadata_round_trip_and_strict_parsing():
    c = memwire.Connector()
    data = np.arange(100, dtype=np.uint8)
    op = await c.create_readable(memwire.Descriptor(data))
    md = op.metadata()
    again = memwire.RdmaMetadata.from_json(md.to_json())
    assert again == md and md.model_dump_json() == md.to_json()
    assert md.operation_kind == memwire.OperationKind.READ
    assert md.descriptors[0]["size"] == 100 and len(md.notification_key) == 32
    assert md.connector == c.name
    fields = json.loads(md.to_json())
    for broken in (
        "not json",
        "{}",
        json.dumps(dict(fields, surprise=1)),
        json.dumps(dict(fields, descriptors=[])),
        json.dumps(dict(fields, operation_kind=7)),
        json.dumps(dict(fields, notification_key="")),
    ):
        with pytest.raises(memwire.InvalidMetadataError):
            memwire.RdmaMetadata.from_json(broken)
    # The native parser's place of the fault is data, as in C++ (MetadataError).
    bad_size = dict(fields, descriptors=[dict(fields["descriptors"][0], size=-1)])
    with pytest.raises(memwire.InvalidMetadataError) as caught:
        memwire.RdmaMetadata.from_json(json.dumps(bad_size))
    assert caught.value.field == "descriptors[0].size" and caught.value.reason
    with pytest.raises(memwire.InvalidMetadataError) as caught:
        memwire.RdmaMetadata.from_json("not json")
    assert caught.value.field is None and caught.value.reason
    with pytest.raises(memwire.InvalidMetadataError):
        await c.begin_read("[1,2]", memwire.Descriptor(bytearray(100)))
    op.cancel()


def test_connector_identity():
    a = memwire.Connector("worker-a")
    assert a.name == "worker-a" and a.hostname and a.is_cuda_available is _libcuda_loads()
    b = memwire.Connector()
    assert len(b.name) == 32 and a != b and a == a
    assert set(b.transports) <= {"verbs", "shm", "tcp"}


# --- the rules, as typed errors -----------------------------------------------------------


@in_a_loop
async def test_pairing_errors():
    c = memwire.Connector()
    readable = await c.create_readable(memwire.Descriptor(bytearray(64)))
    writable = await c.create_writable(memwire.Descriptor(bytearray(64)))
    with pytest.raises(memwire.PairingError):
        await c.begin_read(writable.metadata(), memwire.Descriptor(bytearray(64)))
    with pytest.raises(memwire.PairingError):
        await c.begin_write(memwire.Descriptor(bytearray(64)), readable.metadata())
    assert isinstance(memwire.PairingError("x"), ValueError)


@in_a_loop
async def test_size_and_count_mismatch():
    c = memwire.Connector()
    readable = await c.create_readable(memwire.Descriptor(bytearray(64)))
    with pytest.raises(memwire.SizeMismatchError):
        await c.begin_read(readable.metadata(), memwire.Descriptor(bytearray(65)))
    with pytest.raises(memwire.SizeMismatchError):
        await c.begin_read(readable.metadata(), [memwire.Descriptor(bytearray(32)), memwire.Descriptor(bytearray(32))])
    with pytest.raises(memwire.InvalidArgumentError):
        await c.begin_read(readable.metadata(), [])


@in_a_loop
async def test_bytes_cannot_receive():
    c = memwire.Connector()
    readable = await c.create_readable(memwire.Descriptor(bytearray(3)))
    with pytest.raises(memwire.InvalidArgumentError):
        await c.create_writable(memwire.Descriptor(b"abc"))
    with pytest.raises(memwire.InvalidArgumentError):
        await c.begin_read(readable.metadata(), memwire.Descriptor(b"abc"))


@in_a_loop
async def test_wait_times_out_with_memwire_timeout_error():
    c = memwire.Connector()
    op = await c.create_readable(memwire.Descriptor(bytearray(64)))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(memwire.TimeoutError) as caught:
        await op.wait_for_completion(timeout=0.2)
    assert 0.15 < loop.time() - started < 2
    assert isinstance(caught.value, TimeoutError) and caught.value.code == memwire.ErrorCode.TIMEOUT
    assert op.status == memwire.OperationStatus.INITIALIZED  # a timeout leaves it as it was
    for bad in (0, -1, float("inf"), float("nan"), "soon"):
        with pytest.raises(memwire.InvalidArgumentError):
            await op.wait_for_completion(timeout=bad)


@in_a_loop
async def test_an_expired_readable_is_refused():
    owner = memwire.Connector(metadata_ttl=0.05)
    op = await owner.create_readable(memwire.Descriptor(bytearray(64)))
    md = op.metadata()
    await asyncio.sleep(0.2)
    with pytest.raises((memwire.ExpiredError, memwire.AccessDeniedError)):
        read = await memwire.Connector().begin_read(md, memwire.Descriptor(bytearray(64)))
        await read.wait_for_completion(timeout=5)


@in_a_loop
async def test_results_only_once_complete_and_cancel_rules():
    a, b = memwire.Connector(), memwire.Connector()
    src = np.arange(1 << 16, dtype=np.uint32)
    dst = np.zeros_like(src)
    readable = await a.create_readable(memwire.Descriptor(src))
    read = await b.begin_read(readable.metadata(), memwire.Descriptor(dst))
    # The read may end between begin_read and here: then results() must have its data.
    try:
        early = read.results()
    except memwire.InvalidArgumentError:
        pass
    else:
        assert read.status == memwire.OperationStatus.COMPLETE and early[0].data is dst
    await read.wait_for_completion(timeout=10)
    assert read.results()[0].data is dst and (dst == src).all()
    read.cancel()  # completed: nothing changes
    assert read.status == memwire.OperationStatus.COMPLETE
    assert await readable.wait_for_completion(timeout=10) == memwire.OperationStatus.COMPLETE

    # An errored operation cannot be cancelled.
    gone = await a.create_readable(memwire.Descriptor(bytearray(64)))
    md = gone.metadata()
    gone.close()  # revokes access
    failed = await b.begin_read(md, memwire.Descriptor(bytearray(64)))
    with pytest.raises(memwire.MemwireError):
        await failed.wait_for_completion(timeout=10)
    assert failed.status == memwire.OperationStatus.ERRORED
    with pytest.raises(memwire.InvalidArgumentError):
        failed.cancel()
    with pytest.raises(memwire.InvalidArgumentError):
        failed.results()  # never completed: no results, whatever the timing


# --- cancellation -------------------------------------------------------------------------


@in_a_loop
async def test_cancelling_the_awaiting_task_cancels_a_passive_operation():
    a, b = memwire.Connector(), memwire.Connector()
    op = await a.create_readable(memwire.Descriptor(bytearray(4096)))
    md = op.metadata()
    task = asyncio.create_task(op.wait_for_completion(timeout=30))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert op.status == memwire.OperationStatus.CANCELLED
    # Its memory is no longer readable.
    with pytest.raises(memwire.MemwireError):
        read = await b.begin_read(md, memwire.Descriptor(bytearray(4096)))
        await read.wait_for_completion(timeout=10)


def test_cancelling_the_awaiting_task_cancels_an_active_operation():
    async def main():
        a, b = memwire.Connector(transports=["tcp"]), memwire.Connector(transports=["tcp"])
        size = 256 << 20
        src = np.ones(size, dtype=np.uint8)
        dst = np.zeros(size, dtype=np.uint8)
        readable = await a.create_readable(memwire.Descriptor(src))
        read = await b.begin_read(readable.metadata(), memwire.Descriptor(dst))
        task = asyncio.create_task(read.wait_for_completion(timeout=60))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Cancelled, unless all 256 MiB had already arrived.
        assert read.status in (memwire.OperationStatus.CANCELLED, memwire.OperationStatus.COMPLETE)
        return read.status

    status = run(main())
    assert status == memwire.OperationStatus.CANCELLED


def test_cancel_reaches_a_waiter_through_the_callback_as_cancelled_error_with_the_reason():
    async def main():
        c = memwire.Connector()
        op = await c.create_writable(memwire.Descriptor(bytearray(64)))
        waiter = asyncio.create_task(op.wait_for_completion(timeout=30))
        await asyncio.sleep(0.01)
        op.cancel("the caller left")
        with pytest.raises(memwire.CancelledError, match="the caller left"):
            await asyncio.wait_for(waiter, 5)
        assert op.status == memwire.OperationStatus.CANCELLED
        with pytest.raises(memwire.CancelledError, match="the caller left"):
            op.wait(timeout=1)  # the blocking wait, and a wait after the end, alike

    run(main())


@in_a_loop
async def test_context_managers_end_unfinished_operations():
    c = memwire.Connector()
    with await c.create_readable(memwire.Descriptor(bytearray(64))) as op:
        pass
    assert op.status == memwire.OperationStatus.CANCELLED
    async with c.create_writable(memwire.Descriptor(bytearray(64))) as op2:
        pass
    assert op2.status == memwire.OperationStatus.CANCELLED


# --- loops and the interpreter ------------------------------------------------------------


def test_completion_after_its_loop_closed_is_harmless():
    a, b = memwire.Connector(), memwire.Connector()
    src = np.arange(4096, dtype=np.uint8)

    async def create():
        return await a.create_readable(memwire.Descriptor(src))

    readable = asyncio.run(create())  # armed on a loop that is now closed

    async def read():
        dst = np.zeros_like(src)
        op = await b.begin_read(readable.metadata(), memwire.Descriptor(dst))
        await op.wait_for_completion(timeout=10)
        # Waiting again from this new loop re-arms on it.
        return await readable.wait_for_completion(timeout=10), (dst == src).all()

    assert asyncio.run(read()) == (memwire.OperationStatus.COMPLETE, True)


def test_blocking_wait_outside_asyncio():
    a, b = memwire.Connector(), memwire.Connector()
    src = np.arange(4096, dtype=np.uint8)
    dst = np.zeros_like(src)
    readable = a.create_readable(memwire.Descriptor(src))
    read = b.begin_read(readable.metadata(), memwire.Descriptor(dst))
    assert read.wait(timeout=10) == memwire.OperationStatus.COMPLETE
    assert readable.wait(timeout=10) == memwire.OperationStatus.COMPLETE
    assert (dst == src).all()
    with pytest.raises(memwire.TimeoutError):
        a.create_readable(memwire.Descriptor(bytearray(8))).wait(timeout=0.05)


def test_interpreter_exits_with_operations_in_flight():
    # Operations still open, a waiter pending and threads of memwire running at exit: the process
    # must end promptly and cleanly (no hang on the GIL, no crash in a late callback).
    code = r"""
import asyncio, numpy as np, memwire
a, b = memwire.Connector(), memwire.Connector(transports=["tcp"])
src = np.ones(64 << 20, dtype=np.uint8); dst = np.zeros_like(src)
async def main():
    r = await a.create_readable(memwire.Descriptor(src))
    keep.append(r)
    keep.append(await b.begin_read(r.metadata(), memwire.Descriptor(dst)))
    keep.append(await a.create_writable(memwire.Descriptor(bytearray(64))))
    asyncio.get_running_loop().create_task(keep[-1].wait_for_completion(timeout=60))
keep = []
asyncio.run(main())
print("exiting", flush=True)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, env=os.environ.copy())
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"exiting" in result.stdout


@in_a_loop
async def test_waits_after_a_timeout_and_several_waiters():
    a, b = memwire.Connector(), memwire.Connector()
    src = np.arange(4096, dtype=np.uint8)
    readable = await a.create_readable(memwire.Descriptor(src))
    with pytest.raises(memwire.TimeoutError):
        await readable.wait_for_completion(timeout=0.05)
    # Two waiters at once; one gives up early, the other still sees the completion.
    first = asyncio.create_task(readable.wait_for_completion(timeout=30))
    impatient = asyncio.create_task(readable.wait_for_completion(timeout=0.05))
    with pytest.raises(memwire.TimeoutError):
        await impatient
    assert not first.done()
    dst = np.zeros_like(src)
    read = await b.begin_read(readable.metadata(), memwire.Descriptor(dst))
    assert await read.wait_for_completion(timeout=10) == memwire.OperationStatus.COMPLETE
    assert await asyncio.wait_for(first, 10) == memwire.OperationStatus.COMPLETE
    assert (dst == src).all()


@in_a_loop
async def test_many_short_waits_stay_bounded():
    c = memwire.Connector()
    op = await c.create_writable(memwire.Descriptor(bytearray(8)))
    for _ in range(200):
        with pytest.raises(memwire.TimeoutError):
            await op.wait_for_completion(timeout=0.001)
    from memwire._support import completions_for

    completions = completions_for(asyncio.get_running_loop())
    assert len(completions.watching) == 0 and len(completions.futures) <= 2
