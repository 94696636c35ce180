"""The other process of test_pools' two-process test: owns a pool and awaits it layer by layer.

    pool_peer.py TRANSPORT LAYERS PER_LAYER BLOCK
      prints the pool's metadata (one JSON line), then for each layer i awaits the tag
      "layer-i" and checks that its blocks hold pattern(100 + block); at the end prints
      "done LAYERS ok" (or "mismatch at layer i").
"""

import asyncio
import sys

import numpy as np

import memwire


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


async def main():
    transport, layers, per_layer, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    connector = memwire.Connector(transports=[transport], environment=False)
    kv = np.zeros((layers * per_layer, block), dtype=np.uint8)
    with connector.register_pool((kv, block), name="kv") as pool:
        print(pool.metadata.to_json(), flush=True)
        for i in range(layers):
            await pool.tag(f"layer-{i}", timeout=60)
            for b in range(i * per_layer, (i + 1) * per_layer):
                if not np.array_equal(kv[b], pattern(100 + b, block)):
                    print(f"mismatch at layer {i}", flush=True)
                    return
        print(f"done {layers} ok", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
