"""Bad input gets a clear error, never a crash: raw pointers to memory that is not there,
numbers that do not fit, and what a failing serve handler tells the requester."""

import asyncio
import ctypes
import mmap
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import memwire
from conftest import python_env


def test_raw_descriptors_out_of_range_are_invalid_arguments():
    for bad in ((2**63, 2**63, "cpu"), (2**64, 8, "cpu"), (8, 2**64, "cpu"), (2**70, 1, "cpu"), (1, 2**70, "cpu")):
        with pytest.raises(memwire.InvalidArgumentError):
            memwire.Descriptor(bad)
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Descriptor((2**64 - 4, 8, "cuda:0"))  # wraps around the address space


def anonymous_mapping(size, prot):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    address = libc.mmap(None, size, prot, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value)
    return address


def test_raw_descriptors_of_memory_that_is_not_there_are_refused():
    inaccessible = anonymous_mapping(1 << 16, 0)
    with pytest.raises(memwire.InvalidArgumentError, match="not mapped"):
        memwire.Descriptor((inaccessible, 1 << 16, "cpu"))
    readonly = anonymous_mapping(1 << 16, mmap.PROT_READ)
    d = memwire.Descriptor((readonly, 1 << 16, "cpu"))
    assert d.readonly  # a source, never a destination
    with pytest.raises(memwire.InvalidArgumentError, match="read-only"):
        memwire.Connector().create_writable(d)
    array = np.zeros(1 << 16, dtype=np.uint8)
    partly = memwire.Descriptor((array.ctypes.data, 1 << 16, "cpu", array))
    assert not partly.readonly
    with pytest.raises(memwire.InvalidArgumentError, match="not mapped"):
        memwire.Descriptor((inaccessible - 4096, 8192, "cpu"))  # runs into the hole


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_read_into_memory_that_is_not_there_is_an_error_not_a_crash(transport):
    code = textwrap.dedent(
        f"""
        import asyncio, ctypes, mmap, faulthandler, memwire
        faulthandler.enable()
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        hole = libc.mmap(None, 65536, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        owner, reader = memwire.Connector(transports=["{transport}"]), memwire.Connector(transports=["{transport}"])
        async def main():
            readable = owner.create_readable(memwire.Descriptor(bytearray(65536)))
            try:
                read = reader.begin_read(readable.metadata(), memwire.Descriptor((hole, 65536, "cpu")))
                await read.wait_for_completion(timeout=10)
            except memwire.MemwireError as error:
                print("refused:", type(error).__name__, error)
        asyncio.run(main())
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-3000:]}"
    assert "refused: InvalidArgumentError" in result.stdout


def test_a_failing_serve_handler_tells_its_kind_and_message_not_its_traceback():
    async def main():
        with memwire.HttpEndpoint() as endpoint:
            owner = memwire.Worker(memwire.Connector(), memwire.HttpChannel(endpoint.url))
            asker = memwire.Worker(memwire.Connector(), memwire.HttpChannel(endpoint.url))

            def handler(name):
                raise ValueError("the cache is cold")

            async with await owner.serve("leaky", handler):
                with pytest.raises(memwire.NotFoundError) as caught:
                    await asker.request("leaky.x", memwire.Descriptor(bytearray(8)), timeout=10)
            text = str(caught.value)
            assert "ValueError: the cache is cold" in text
            for leak in ("Traceback", ".py", "line ", __file__):
                assert leak not in text, text

    asyncio.run(main())
