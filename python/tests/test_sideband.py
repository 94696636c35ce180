"""Data by name: Python with Python, and Python with memwire's C++ programs (the `memwire` CLI,
memwire-producer, memwire-consumer), over HTTP (an endpoint embedded here) and NATS (a private
nats-server)."""

import asyncio
import uuid

import numpy as np
import pytest

import memwire
from conftest import program


def embedding(request_id, dim):
    """services/workers/embedding.hpp's embedding_value, in numpy."""
    index = np.arange(dim, dtype=np.uint64)
    mixed = (np.uint64(request_id) * np.uint64(2654435761) + index * np.uint64(40503)) % np.uint64(65536)
    return mixed.astype(np.float32) / np.float32(256.0) - np.float32(128.0)


@pytest.fixture(params=["http", "nats"])
def channel_url(request):
    """(kind, url, make_channel) for each channel."""
    if request.param == "http":
        endpoint = request.getfixturevalue("http_endpoint")
        return "http", endpoint.url, lambda: memwire.HttpChannel(endpoint.url)
    url = request.getfixturevalue("nats_url")
    return "nats", url, lambda: memwire.NatsChannel(url)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_publish_and_read_by_name(channel_url):
    _, _, make = channel_url

    async def main():
        owner = memwire.Worker(memwire.Connector(), make())
        reader = memwire.Worker(memwire.Connector(), make())
        name = unique("py.pub")
        data = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
        # The reader starts first and waits for the name to appear.
        target = np.zeros_like(data)
        read_task = asyncio.create_task(reader.read(name, memwire.Descriptor(target), timeout=20, wait=True))
        await asyncio.sleep(0.1)
        async with await owner.publish(name, memwire.Descriptor(data)) as lease:
            op = await read_task
            assert await lease.wait(timeout=10) == memwire.OperationStatus.COMPLETE
        assert op.status == memwire.OperationStatus.COMPLETE and (target == data).all()
        with pytest.raises(memwire.NotFoundError):  # the lease's end withdrew the name
            await reader.read(name, memwire.Descriptor(target), timeout=2)
        assert name not in await reader.channel.list()

    asyncio.run(main())


def test_serve_and_request(channel_url):
    _, _, make = channel_url

    async def main():
        owner = memwire.Worker(memwire.Connector(), make())
        asker = memwire.Worker(memwire.Connector(), make())
        prefix = unique("py.srv")
        served = []

        def handler(name):
            served.append(name)
            if name.endswith(".missing"):
                raise memwire.NotFoundError(f"no {name}")
            if name.endswith(".broken"):
                return None  # not memory: the requester hears InvalidArgument
            if name.endswith(".crash"):
                raise RuntimeError("handler bug")  # any other exception: NotFound, with its text
            return memwire.Descriptor(embedding(int(name.rsplit("-", 1)[1]), 512))

        async with await owner.serve(prefix, handler):
            for request_id in (3, 4):
                local = np.zeros(512, dtype=np.float32)
                op = await asker.request(f"{prefix}.req-{request_id}", memwire.Descriptor(local), timeout=20)
                assert op.status == memwire.OperationStatus.COMPLETE
                assert (local == embedding(request_id, 512)).all()
            with pytest.raises(memwire.NotFoundError):
                await asker.request(f"{prefix}.missing", memwire.Descriptor(bytearray(16)), timeout=10)
            with pytest.raises(memwire.InvalidArgumentError):
                await asker.request(f"{prefix}.broken", memwire.Descriptor(bytearray(16)), timeout=10)
            with pytest.raises(memwire.NotFoundError, match="handler bug"):
                await asker.request(f"{prefix}.crash", memwire.Descriptor(bytearray(16)), timeout=10)
            with pytest.raises(memwire.SizeMismatchError):
                await asker.request(f"{prefix}.req-1", memwire.Descriptor(bytearray(16)), timeout=10)
        assert served[:2] == [f"{prefix}.req-3", f"{prefix}.req-4"]

    asyncio.run(main())


def test_async_serve_handler(channel_url):
    _, _, make = channel_url

    async def main():
        owner = memwire.Worker(memwire.Connector(), make())
        asker = memwire.Worker(memwire.Connector(), make())
        prefix = unique("py.async")

        async def handler(name):
            await asyncio.sleep(0.01)
            return np.full(100, 7, dtype=np.uint8)

        async with await owner.serve(prefix, handler):
            local = bytearray(100)
            await asker.request(f"{prefix}.x", memwire.Descriptor(local), timeout=20)
        assert local == bytearray([7]) * 100

    asyncio.run(main())


def test_unknown_names_and_bad_names(channel_url):
    _, _, make = channel_url

    async def main():
        worker = memwire.Worker(memwire.Connector(), make())
        with pytest.raises(memwire.NotFoundError):
            await worker.read(unique("py.none"), memwire.Descriptor(bytearray(8)), timeout=2)
        with pytest.raises(memwire.TimeoutError):
            await worker.read(unique("py.none"), memwire.Descriptor(bytearray(8)), timeout=0.3, wait=True)
        with pytest.raises(memwire.InvalidArgumentError):
            await worker.read("bad name!", memwire.Descriptor(bytearray(8)), timeout=2)
        with pytest.raises(memwire.NotFoundError):
            await worker.request(unique("py.nobody"), memwire.Descriptor(bytearray(8)), timeout=2)

    asyncio.run(main())


# --- with C++ programs ----------------------------------------------------------------------


def test_python_publishes_and_the_cpp_cli_gets(channel_url, children, tmp_path):
    kind, url, make = channel_url
    cli = program("services/memwire")
    data = np.random.default_rng(2).integers(0, 256, (3 << 20) + 17, dtype=np.uint8)
    name = unique("py.to-cpp")
    out = tmp_path / "out.bin"

    async def main():
        owner = memwire.Worker(memwire.Connector(), make())
        async with await owner.publish(name, memwire.Descriptor(data)) as lease:
            child = children([cli, "get", name, str(out), f"--{kind}", url, "--timeout", "20"], stdin=False)
            status = await lease.wait(timeout=30)
            code = await asyncio.get_running_loop().run_in_executor(None, child.wait, 30)
            return status, code, child

    status, code, child = asyncio.run(main())
    assert code == 0, child.stderr_tail()
    assert status == memwire.OperationStatus.COMPLETE
    assert out.read_bytes() == data.tobytes()


def test_the_cpp_cli_serves_and_python_reads(channel_url, children, tmp_path):
    kind, url, make = channel_url
    cli = program("services/memwire")
    data = np.random.default_rng(3).integers(0, 256, (2 << 20) + 5, dtype=np.uint8)
    source = tmp_path / "in.bin"
    source.write_bytes(data.tobytes())
    name = unique("cpp.to-py")
    child = children([cli, "serve", name, str(source), f"--{kind}", url, "--count", "1"], stdin=False)

    async def main():
        reader = memwire.Worker(memwire.Connector(), make())
        target = np.zeros_like(data)
        op = await reader.read(name, memwire.Descriptor(target), timeout=20, wait=True)
        return op, target

    op, target = asyncio.run(main())
    assert op.status == memwire.OperationStatus.COMPLETE and op.transport in ("shm", "tcp")
    assert (target == data).all()
    assert child.wait(20) == 0, child.stderr_tail()


def test_cpp_consumer_requests_from_a_python_server(channel_url, children):
    kind, url, make = channel_url
    consumer = program("services/memwire-consumer")
    prefix = unique("pyserve")
    dim, count = 256, 3

    async def main():
        owner = memwire.Worker(memwire.Connector(), make())
        handler = lambda name: memwire.Descriptor(embedding(int(name.rsplit("-", 1)[1]), dim))  # noqa: E731
        async with await owner.serve(prefix, handler):
            child = children([consumer, f"--{kind}", url, "--mode", "request", "--prefix", prefix,
                              "--requests", str(count), "--dim", str(dim), "--timeout", "30"], stdin=False)
            code = await asyncio.get_running_loop().run_in_executor(None, child.wait, 60)
            return code, child

    code, child = asyncio.run(main())
    assert code == 0, child.stderr_tail()
    assert f"{count}/{count} embeddings verified" in child.process.stdout.read().decode()


def test_cpp_consumer_reads_what_python_publishes(channel_url, children):
    kind, url, make = channel_url
    consumer = program("services/memwire-consumer")
    prefix = unique("pypub")
    dim, count = 300, 2

    async def main():
        owner = memwire.Worker(memwire.Connector(), make())
        arrays = [embedding(i, dim) for i in range(count)]
        leases = [await owner.publish(f"{prefix}.req-{i}", memwire.Descriptor(a)) for i in range(count) for a in [arrays[i]]]
        child = children([consumer, f"--{kind}", url, "--mode", "read", "--prefix", prefix,
                          "--requests", str(count), "--dim", str(dim), "--timeout", "30"], stdin=False)
        code = await asyncio.get_running_loop().run_in_executor(None, child.wait, 60)
        for lease in leases:
            lease.close()
        return code, child

    code, child = asyncio.run(main())
    assert code == 0, child.stderr_tail()


def test_python_requests_from_the_cpp_producer(channel_url, children):
    kind, url, make = channel_url
    producer = program("services/memwire-producer")
    prefix = unique("cppserve")
    dim, count = 200, 3
    child = children([producer, f"--{kind}", url, "--mode", "writable", "--prefix", prefix,
                      "--requests", str(count), "--dim", str(dim), "--timeout", "30"], stdin=False)

    async def main():
        asker = memwire.Worker(memwire.Connector(), make())
        for request_id in range(count):
            local = np.zeros(dim, dtype=np.float32)
            for _ in range(100):  # the producer may not serve yet: NotFound until it does
                try:
                    await asker.request(f"{prefix}.req-{request_id}", memwire.Descriptor(local), timeout=10)
                    break
                except memwire.NotFoundError:
                    await asyncio.sleep(0.05)
            assert (local == embedding(request_id, dim)).all(), request_id

    asyncio.run(main())
    assert child.wait(30) == 0, child.stderr_tail()


def test_python_reads_what_the_cpp_producer_publishes(channel_url, children):
    kind, url, make = channel_url
    producer = program("services/memwire-producer")
    prefix = unique("cpppub")
    dim, count = 128, 2
    child = children([producer, f"--{kind}", url, "--mode", "readable", "--prefix", prefix,
                      "--requests", str(count), "--dim", str(dim), "--timeout", "30"], stdin=False)

    async def main():
        reader = memwire.Worker(memwire.Connector(), make())
        for request_id in range(count):
            local = np.zeros(dim, dtype=np.float32)
            await reader.read(f"{prefix}.req-{request_id}", memwire.Descriptor(local), timeout=20, wait=True)
            assert (local == embedding(request_id, dim)).all(), request_id

    asyncio.run(main())
    assert child.wait(30) == 0, child.stderr_tail()


def test_nats_kv_replicas_is_an_option(nats_url):
    """Issue 23, finding 8: Python could not say how many copies of the registry to create; the
    default (0) is one per server of the cluster, up to 3, and a count out of 0..5 is refused."""
    assert memwire.NatsChannel(nats_url, kv_replicas=1) is not None
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.NatsChannel(nats_url, kv_replicas=9)
