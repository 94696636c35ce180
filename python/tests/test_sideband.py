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


@pytest.fixture
def new_worker(channel_url):
    """Makes a Worker on the channel, with a connector of its own (in the event loop that uses it)."""
    make = channel_url[2]
    return lambda: memwire.Worker(memwire.Connector(), make())


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def start_stage(children, stage, channel_url, mode, prefix, count, dim):
    """memwire-<stage> (producer or consumer) over the channel, in `mode`, for the names
    prefix.req-0..count-1 and embeddings of `dim` floats."""
    kind, url, _ = channel_url
    return children([program(f"services/memwire-{stage}"), f"--{kind}", url, "--mode", mode, "--prefix", prefix,
                     "--requests", str(count), "--dim", str(dim), "--timeout", "30"], stdin=False)


def test_publish_and_read_by_name(new_worker):
    async def main():
        owner, reader = new_worker(), new_worker()
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


def test_serve_and_request(new_worker):
    async def main():
        owner, asker = new_worker(), new_worker()
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


def test_async_serve_handler(new_worker):
    async def main():
        owner, asker = new_worker(), new_worker()
        prefix = unique("py.async")

        async def handler(name):
            await asyncio.sleep(0.01)
            return np.full(100, 7, dtype=np.uint8)

        async with await owner.serve(prefix, handler):
            local = bytearray(100)
            await asker.request(f"{prefix}.x", memwire.Descriptor(local), timeout=20)
        assert local == bytearray([7]) * 100

    asyncio.run(main())


def test_unknown_names_and_bad_names(new_worker):
    async def main():
        worker = new_worker()
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


def test_python_publishes_and_the_cpp_cli_gets(new_worker, channel_url, children, tmp_path):
    kind, url, _ = channel_url
    cli = program("services/memwire")
    data = np.random.default_rng(2).integers(0, 256, (3 << 20) + 17, dtype=np.uint8)
    name = unique("py.to-cpp")
    out = tmp_path / "out.bin"

    async def main():
        owner = new_worker()
        async with await owner.publish(name, memwire.Descriptor(data)) as lease:
            child = children([cli, "get", name, str(out), f"--{kind}", url, "--timeout", "20"], stdin=False)
            status = await lease.wait(timeout=30)
            code = await asyncio.get_running_loop().run_in_executor(None, child.wait, 30)
            return status, code, child

    status, code, child = asyncio.run(main())
    assert code == 0, child.stderr_tail()
    assert status == memwire.OperationStatus.COMPLETE
    assert out.read_bytes() == data.tobytes()


def test_the_cpp_cli_serves_and_python_reads(new_worker, channel_url, children, tmp_path):
    kind, url, _ = channel_url
    cli = program("services/memwire")
    data = np.random.default_rng(3).integers(0, 256, (2 << 20) + 5, dtype=np.uint8)
    source = tmp_path / "in.bin"
    source.write_bytes(data.tobytes())
    name = unique("cpp.to-py")
    child = children([cli, "serve", name, str(source), f"--{kind}", url, "--count", "1"], stdin=False)

    async def main():
        reader = new_worker()
        target = np.zeros_like(data)
        op = await reader.read(name, memwire.Descriptor(target), timeout=20, wait=True)
        return op, target

    op, target = asyncio.run(main())
    assert op.status == memwire.OperationStatus.COMPLETE and op.transport in ("shm", "tcp")
    assert (target == data).all()
    assert child.wait(20) == 0, child.stderr_tail()


def test_cpp_consumer_requests_from_a_python_server(new_worker, channel_url, children):
    prefix = unique("pyserve")
    dim, count = 256, 3

    async def main():
        owner = new_worker()
        handler = lambda name: memwire.Descriptor(embedding(int(name.rsplit("-", 1)[1]), dim))  # noqa: E731
        async with await owner.serve(prefix, handler):
            child = start_stage(children, "consumer", channel_url, "request", prefix, count, dim)
            code = await asyncio.get_running_loop().run_in_executor(None, child.wait, 60)
            return code, child

    code, child = asyncio.run(main())
    assert code == 0, child.stderr_tail()
    assert f"{count}/{count} embeddings verified" in child.process.stdout.read().decode()


def test_cpp_consumer_reads_what_python_publishes(new_worker, channel_url, children):
    prefix = unique("pypub")
    dim, count = 300, 2

    async def main():
        owner = new_worker()
        arrays = [embedding(i, dim) for i in range(count)]
        leases = [await owner.publish(f"{prefix}.req-{i}", memwire.Descriptor(a)) for i in range(count) for a in [arrays[i]]]
        child = start_stage(children, "consumer", channel_url, "read", prefix, count, dim)
        code = await asyncio.get_running_loop().run_in_executor(None, child.wait, 60)
        for lease in leases:
            lease.close()
        return code, child

    code, child = asyncio.run(main())
    assert code == 0, child.stderr_tail()


async def expect_embeddings(new_worker, prefix, count, dim, fetch):
    """Fetches prefix.req-0..count-1 into zeroed memory with ``fetch(worker, name, descriptor)``
    on a new worker, and checks each embedding."""
    worker = new_worker()
    for request_id in range(count):
        local = np.zeros(dim, dtype=np.float32)
        await fetch(worker, f"{prefix}.req-{request_id}", memwire.Descriptor(local))
        assert (local == embedding(request_id, dim)).all(), request_id


def test_python_requests_from_the_cpp_producer(new_worker, channel_url, children):
    prefix = unique("cppserve")
    dim, count = 200, 3
    child = start_stage(children, "producer", channel_url, "writable", prefix, count, dim)

    async def request(asker, name, local):
        for _ in range(100):  # the producer may not serve yet: NotFound until it does
            try:
                return await asker.request(name, local, timeout=10)
            except memwire.NotFoundError:
                await asyncio.sleep(0.05)

    asyncio.run(expect_embeddings(new_worker, prefix, count, dim, request))
    assert child.wait(30) == 0, child.stderr_tail()


def test_python_reads_what_the_cpp_producer_publishes(new_worker, channel_url, children):
    prefix = unique("cpppub")
    dim, count = 128, 2
    child = start_stage(children, "producer", channel_url, "readable", prefix, count, dim)

    def read(reader, name, local):
        return reader.read(name, local, timeout=20, wait=True)

    asyncio.run(expect_embeddings(new_worker, prefix, count, dim, read))
    assert child.wait(30) == 0, child.stderr_tail()


def test_nats_kv_replicas_is_an_option(nats_url):
    """Issue 23, finding 8: Python could not say how many copies of the registry to create; the
    default (0) is one per server of the cluster, up to 3, and a count out of 0..5 is refused."""
    assert memwire.NatsChannel(nats_url, kv_replicas=1) is not None
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.NatsChannel(nats_url, kv_replicas=9)
