"""pytest plugin: runs NVIDIA Dynamo's own tests on memwire's drop-in.

    MEMWIRE_DYNAMO_SYSTEM=memwire       dynamo.nixl_connect is memwire (the only change: the import)
    MEMWIRE_DYNAMO_SYSTEM=nixl_connect  Dynamo's own nixl_connect, unchanged

MEMWIRE_DYNAMO_MAX_ITEMS lowers NixlReadEmbeddingReceiver's pre-registered buffers (1,024 x 8 MiB
by default: 8 GiB) to fit a CI machine's memory; said in the run's output.
"""

import os
import sys

import pytest


def pytest_configure(config):
    system = os.environ.get("MEMWIRE_DYNAMO_SYSTEM", "memwire")
    if system == "memwire":
        import dynamo
        import memwire

        sys.modules["dynamo.nixl_connect"] = memwire
        dynamo.nixl_connect = memwire
    elif system != "nixl_connect":
        raise pytest.UsageError(f"MEMWIRE_DYNAMO_SYSTEM is memwire or nixl_connect, not {system!r}")
    max_items = os.environ.get("MEMWIRE_DYNAMO_MAX_ITEMS")
    if max_items:
        from dynamo.common.multimodal import embedding_transfer

        init = embedding_transfer.NixlReadEmbeddingReceiver.__init__
        hidden, tokens, items = init.__defaults__
        init.__defaults__ = (hidden, tokens, int(max_items))
        print(f"dynamo_dropin: NixlReadEmbeddingReceiver max_items {items} -> {max_items} "
              f"({int(max_items) * hidden * tokens >> 20} MiB pre-registered)", file=sys.stderr)
    print(f"dynamo_dropin: dynamo.nixl_connect is {sys.modules.get('dynamo.nixl_connect', 'Dynamo own')}",
          file=sys.stderr)
