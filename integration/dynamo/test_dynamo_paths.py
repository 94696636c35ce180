"""Dynamo's own transfer code, driven end to end on whichever dynamo.nixl_connect the plugin
(dynamo_dropin.py) put in place: memwire's drop-in or Dynamo's own.

- mm_kwargs: the frontend's MmKwargsNixlSender.prepare -> the backend's MmKwargsNixlReceiver
  (pre-registered 8 MiB descriptors reused for smaller items through ``_data_size``) -> the
  sender's cleanup, as vllm_processor runs them. vLLM's msgpack encoder is not installed here,
  so ``encode_mm_kwargs_item`` is replaced by one that hands the item's bytes on unchanged; the
  transfer code is Dynamo's.
- media: ``media_nixl.read_decoded_media_via_nixl``, the backend's read of an image the frontend
  decoded: it builds RdmaMetadata from nixl_connect's four fields and a SerializedDescriptor.
  The frontend's part (Dynamo's Rust frontend registering the image with NIXL) is played by the
  same system's readable operation, whose metadata gives ``nixl_metadata`` and the descriptor.
Every byte is checked.
"""

import asyncio
import os
import time

import pytest
import torch

from dynamo import nixl_connect

SYSTEM = os.environ.get("MEMWIRE_DYNAMO_SYSTEM", "memwire")


def _report(what, seconds):
    print(f"\ndynamo paths [{SYSTEM}]: {what}: {seconds * 1e3:.2f} ms")


class _Feature:
    def __init__(self, data, mm_hash):
        self.data = data
        self.mm_hash = mm_hash


@pytest.mark.asyncio
async def test_mm_kwargs_sender_to_receiver_and_cleanup(monkeypatch):
    from dynamo.common.multimodal import mm_kwargs_transfer as transfer

    monkeypatch.setattr(transfer, "encode_mm_kwargs_item", lambda data: bytes(data))
    sender = transfer.MmKwargsNixlSender()
    receiver = transfer.MmKwargsNixlReceiver(max_item_bytes=8 << 20, pool_size=4)
    assert sender._is_available() and receiver._available
    generator = torch.Generator().manual_seed(7)
    for round_ in range(3):
        # Three images of different sizes, one past the pre-registered 8 MiB (a dynamic one).
        sizes = [3 << 20, 123_457, (8 << 20) + 4096] if round_ == 0 else [1 << 20, 5 << 20]
        items = [torch.randint(0, 256, (n,), dtype=torch.uint8, generator=generator).numpy().tobytes()
                 for n in sizes]
        features = [_Feature(item, f"hash-{round_}-{i}") for i, item in enumerate(items)]
        features.insert(1, _Feature(None, "cached"))  # a cached item: no data to move
        began = time.perf_counter()
        extra_args, cleanup_items = await sender.prepare(features, "image")
        prepared = time.perf_counter()
        metadata = transfer.MmKwargsTransferMetadata.model_validate(extra_args["mm_kwargs_nixl"])
        assert metadata.mm_hashes == [f.mm_hash for f in features]
        received = await receiver.receive(metadata)
        done = time.perf_counter()
        await sender.cleanup(cleanup_items)
        got = received["__pickled_kwargs_item__"]
        assert [len(b) for b in got] == sizes
        assert all(bytes(b) == item for b, item in zip(got, items)), "bytes differ"
        _report(f"mm_kwargs round {round_}: prepare {len(items)} items", prepared - began)
        _report(f"mm_kwargs round {round_}: receive {sum(sizes) >> 10} KiB", done - prepared)
    # The pool's descriptors came back with their full size.
    assert all(d._data_size == 8 << 20 for d in list(receiver._pool.queue))


@pytest.mark.asyncio
async def test_media_read_of_a_decoded_image():
    from dynamo.common.utils.media_nixl import read_decoded_media_via_nixl

    owner = nixl_connect.Connector()
    reader = nixl_connect.Connector()
    generator = torch.Generator().manual_seed(11)
    for shape in ([480, 640, 4], [17, 33, 4]):
        image = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
        readable = await owner.create_readable(nixl_connect.Descriptor(image))
        metadata = readable.metadata()
        descriptor = metadata.descriptors[0]
        decoded_meta = {
            "nixl_metadata": metadata.nixl_metadata,
            "nixl_descriptor": {"addr": descriptor.ptr, "size": descriptor.size, "mem_type": "DRAM",
                                "device_id": 0},
            "shape": shape,
            "dtype": "uint8",
            "metadata": {"source": "test"},
        }
        began = time.perf_counter()
        array, extra = await read_decoded_media_via_nixl(reader, decoded_meta, return_metadata=True)
        _report(f"media read {shape}", time.perf_counter() - began)
        assert extra == {"source": "test"}
        assert array.shape == (shape[0], shape[1], 3)
        assert (array == image.numpy()[..., :3]).all(), "bytes differ"
        if SYSTEM == "memwire":
            # memwire's nixl_metadata names the owner's operation: it completes with the read.
            await asyncio.wait_for(readable.wait_for_completion(), 10)
        del readable


@pytest.mark.asyncio
async def test_media_read_refuses_metadata_it_cannot_use():
    if SYSTEM != "memwire":
        pytest.skip("memwire's own errors")
    from dynamo.common.utils.media_nixl import read_decoded_media_via_nixl

    reader = nixl_connect.Connector()
    decoded_meta = {"nixl_metadata": "b64:eJwDAAAAAAE=", "shape": [2, 2, 4], "dtype": "uint8",
                    "nixl_descriptor": {"addr": 4096, "size": 16, "mem_type": "DRAM", "device_id": 0}}
    with pytest.raises(nixl_connect.InvalidMetadataError, match="NIXL agent"):
        await read_decoded_media_via_nixl(reader, decoded_meta)
