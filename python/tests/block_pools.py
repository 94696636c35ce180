"""Two connectors' block pools for the grant and layer-stream tests: decode's zeroed, prefill's
holding 'p' in every byte."""

import contextlib

import numpy as np

import memwire


@contextlib.contextmanager
def block_pools(transport, blocks, block):
    """(decode's memory, decode's pool, prefill's connector, prefill's pool, prefill's memory):
    `blocks` blocks of `block` bytes each side, on connectors that offer only `transport`."""
    decode = memwire.Connector(transports=[transport], environment=False, name="decode")
    prefill = memwire.Connector(transports=[transport], environment=False, name="prefill")
    there = np.zeros(blocks * block, dtype=np.uint8)
    here = np.full(blocks * block, ord("p"), dtype=np.uint8)
    with decode.register_pool((there, block)) as pool, prefill.register_pool((here, block)) as local:
        yield there, pool, prefill, local, here
