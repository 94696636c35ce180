"""nixl_connect's members beyond its documented API that Dynamo's components use (issue 41):
the shared connection, descriptor registration, ``_data_size`` / ``_data_ref``,
SerializedDescriptor, metadata descriptors as objects and RdmaMetadata's keyword form; with
memwire's own guarantees kept (bounded sizes, typed errors). integration/dynamo/run runs Dynamo's
own code on them."""

import asyncio
import concurrent.futures
import json

import numpy as np
import pytest

import memwire


def run(coroutine):
    return asyncio.run(coroutine)


def test_one_shared_connection_from_any_thread_or_loop():
    connector = memwire.Connector(enable_progress_thread=True)
    first = run(connector._create_connection())
    # Dynamo's run_async: asyncio.run on a worker thread.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        others = list(pool.map(lambda _: asyncio.run(connector._create_connection()), range(8)))
    assert all(c is first for c in others)
    assert first.connector is connector and first.name == f"{connector.name}-1" and str(first) == first.name
    assert run(memwire.Connector()._create_connection()) is not first
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.Connector(enable_progress_thread="yes")


def test_registration_keeps_nixl_connects_rules():
    a, b = (run(memwire.Connector()._create_connection()) for _ in range(2))
    d = memwire.Descriptor(bytearray(64))
    assert not d.is_registered
    d.register_with_connector(a)
    d.register_with_connector(a)  # again with the same one: nothing
    assert d.is_registered
    with pytest.raises(RuntimeError, match="more than one connection"):
        d.register_with_connector(b)
    with pytest.raises(RuntimeError, match="registered with"):
        d.deregister_with_connector(b)
    with pytest.raises(TypeError):
        d.register_with_connector(object())
    d.deregister_with_connector(a)
    assert not d.is_registered
    d.deregister_with_connector(a)  # not registered: a warning, no error
    d.register_with_connector(b)
    assert d.is_registered


def test_data_size_is_bounded_by_the_memory():
    buffer = np.arange(4096, dtype=np.uint8)
    d = memwire.Descriptor(buffer)
    assert d._data_ref is buffer and d._data_ptr == d.ptr and d._data_device == d.device
    d._data_size = 100
    assert d.size == 100 and d._data_size == 100 and d.metadata.size == 100
    d._data_size = 4096  # back up to the memory's size
    for bad in (0, -1, 4097, 1 << 40, 1.5, True, "10"):
        with pytest.raises(memwire.InvalidArgumentError):
            d._data_size = bad
    assert d.size == 4096
    d._data_size = 10
    copy = memwire.Descriptor(d)
    with pytest.raises(memwire.InvalidArgumentError):
        copy._data_size = 4097  # a copy keeps the memory's bound
    copy._data_size = 4096


def test_a_smaller_data_size_moves_that_many_bytes_and_the_buffer_is_reused():
    async def main():
        owner, reader = memwire.Connector(), memwire.Connector()
        connection = await reader._create_connection()
        target = np.full(1 << 20, 0xEE, dtype=np.uint8)
        d = memwire.Descriptor(target)
        d.register_with_connector(connection)
        for size in (1000, 300_001, 1 << 20, 17):
            source = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
            readable = await owner.create_readable(memwire.Descriptor(source))
            metadata = memwire.RdmaMetadata.model_validate(readable.metadata().model_dump())
            target[:] = 0xEE
            d._data_size = size
            read = await reader.begin_read(metadata, d)
            await read.wait_for_completion(timeout=10)
            await readable.wait_for_completion(timeout=10)
            d._data_size = 1 << 20
            assert (target[:size] == source).all()
            assert (target[size:] == 0xEE).all(), "bytes past _data_size were written"
            assert d.is_registered
        # A size the remote does not have is refused, naming both.
        source = np.zeros(100, dtype=np.uint8)
        readable = await owner.create_readable(memwire.Descriptor(source))
        d._data_size = 99
        with pytest.raises(memwire.SizeMismatchError):
            read = await reader.begin_read(readable.metadata(), d)
            await read.wait_for_completion(timeout=10)
        readable.cancel()

    run(main())


def test_serialized_descriptor_checks_what_nixl_connect_checks():
    s = memwire.SerializedDescriptor(device="CUDA:1 ", ptr=0x1000, size=0)
    assert (s.device, s.ptr, s.size) == ("cuda:1", 0x1000, 0)
    assert s["size"] == 0 and s.model_dump() == {"device": "cuda:1", "ptr": 4096, "size": 0}
    assert s == memwire.SerializedDescriptor("cuda:1", 0x1000, 0)
    for bad in (dict(ptr=0), dict(ptr=1, size=-1), dict(device="tpu", ptr=1), dict(device=3, ptr=1),
                dict(ptr=1 << 64), dict(ptr=(1 << 64) - 10, size=100)):
        with pytest.raises((ValueError, TypeError)):
            memwire.SerializedDescriptor(**bad)
    with pytest.raises(AttributeError):
        s.size = 5
    # Local memory comes back as a Descriptor; memory this process does not map is refused.
    buffer = bytearray(b"x" * 32)
    local = memwire.Descriptor(buffer)
    again = memwire.Descriptor.from_serialized(local.metadata)
    assert (again.ptr, again.size) == (local.ptr, 32)
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.SerializedDescriptor(ptr=8, size=8).to_descriptor()


def test_rdma_metadata_keyword_form_and_nixl_metadata():
    async def main():
        owner, reader = memwire.Connector(), memwire.Connector()
        source = np.arange(256, dtype=np.uint8)
        readable = await owner.create_readable(memwire.Descriptor(source))
        md = readable.metadata()
        assert isinstance(md.descriptors[0], memwire.SerializedDescriptor)
        assert md.descriptors[0].size == 256 and md.descriptors[0].ptr == source.ctypes.data
        text = md.nixl_metadata
        assert text.startswith("memwire:")
        # Dynamo's media path: nixl_connect's four fields, a fresh key beside the owner's.
        rebuilt = memwire.RdmaMetadata(
            descriptors=[memwire.SerializedDescriptor(device="cpu", ptr=source.ctypes.data, size=256)],
            nixl_metadata=text, notification_key="a-label-of-the-reader", operation_kind=1)
        assert rebuilt == md and rebuilt.notification_key == md.notification_key
        target = bytearray(256)
        read = await reader.begin_read(rebuilt, memwire.Descriptor(target))
        await read.wait_for_completion(timeout=10)
        await readable.wait_for_completion(timeout=10)
        assert bytes(target) == source.tobytes()

        good = dict(descriptors=[{"device": "cpu", "ptr": 4096, "size": 8}], nixl_metadata=text,
                    operation_kind=1)
        assert memwire.RdmaMetadata(**good).descriptors[0].ptr == 4096  # dicts are accepted too
        owner_part = json.loads(__import__("base64").b64decode(text[len("memwire:"):]))
        for broken in (
            dict(good, nixl_metadata="b64:eJwDAAAAAAE="),  # a NIXL agent's
            dict(good, nixl_metadata="memwire:!!!"),
            dict(good, nixl_metadata="memwire:" + __import__("base64").b64encode(b"[1]").decode()),
            dict(good, nixl_metadata=None),
            dict(good, nixl_metadata="memwire:" + __import__("base64").b64encode(
                json.dumps(dict(owner_part, token="x")).encode()).decode()),
            dict(good, descriptors=[]),
            dict(good, descriptors=[{"device": "cpu", "ptr": 0, "size": 8}]),
            dict(good, descriptors=[{"device": "cpu", "ptr": 8, "size": 8, "extra": 1}]),
            dict(good, operation_kind=7),
            dict(good, operation_kind="1"),
            dict(good, notification_key=5),
        ):
            with pytest.raises(memwire.InvalidMetadataError):
                memwire.RdmaMetadata(**broken)
        with pytest.raises(memwire.InvalidMetadataError):
            memwire.RdmaMetadata(md._native, operation_kind=1)

    run(main())


def test_pydantic_names_of_serialized_descriptor_and_connection_metadata():
    s = memwire.SerializedDescriptor(device="cpu", ptr=64, size=8)
    assert memwire.SerializedDescriptor.model_validate_json(s.model_dump_json()) == s
    assert memwire.SerializedDescriptor.model_validate(s.model_dump()) == s
    assert memwire.SerializedDescriptor.model_validate(s) is s
    for bad in ("[1]", "{", '{"ptr": 0}', '{"ptr": 8, "surprise": 1}'):
        with pytest.raises(ValueError):
            memwire.SerializedDescriptor.model_validate_json(bad)
    connector = memwire.Connector("named-worker")
    metadata = json.loads(run(connector._create_connection()).metadata)
    assert metadata["connector"] == "named-worker" and metadata["transports"] == list(connector.transports)
