"""The usage examples of nixl_connect's documentation, run unchanged on memwire.

Each snippet (nixl_connect_examples.md, beside this file) is the example's text as the docs
give it (the current docs, and the older pages where the code differed). The only change is
the import: the snippets say ``dynamo.nixl_connect``, which is bound here to ``memwire`` (as
``import memwire as connect`` would). What the examples leave to the application (the sideband
that carries the metadata, Dynamo's ``async_on_start`` and ``dynamo_context``) is supplied by
the test: two workers in one event loop, handing metadata over an asyncio queue.
"""

import asyncio
import pathlib
import re
import textwrap
import types

import pytest

import memwire

torch = pytest.importorskip("torch", reason="the examples move torch tensors (python3-torch)")

EXAMPLES = pathlib.Path(__file__).with_name("nixl_connect_examples.md")


def examples():
    """{name: {version: text}} of the docs' snippets in EXAMPLES."""
    found = {}
    text = EXAMPLES.read_text()
    blocks = re.findall(r"^## (\w+) \((\w+)\)\n\n```python\n(.*?)^```$", text, re.M | re.S)
    for name, version, snippet in blocks:
        found.setdefault(name, {})[version] = snippet
    return found


SNIPPETS = examples()
CONNECTOR_INIT = SNIPPETS["connector_init"]
READABLE = SNIPPETS["readable"]
READ = SNIPPETS["read"]
WRITABLE = SNIPPETS["writable"]
WRITE = SNIPPETS["write"]


def make_worker(*snippets):
    """A worker class whose methods are the snippets, compiled with only the import changed."""
    namespace = {
        "dynamo": types.SimpleNamespace(nixl_connect=memwire),  # import memwire as nixl_connect
        "torch": torch,
        "async_on_start": lambda function: function,  # Dynamo's decorator: marks a start hook
        "dynamo_context": {"runtime": None},  # Dynamo's runtime handle; memwire needs none
    }
    for snippet in snippets:
        exec(compile(textwrap.dedent(snippet), "<nixl_connect docs>", "exec"), namespace)

    class Worker:
        def __init__(self):
            self.sideband = asyncio.Queue()

        async def notify_remote_data(self, metadata):  # the application's sideband
            await self.peer.sideband.put(metadata.to_json())

        request_remote_data = notify_remote_data

    for name, value in namespace.items():
        if callable(value) and getattr(value, "__code__", None) and value.__code__.co_filename == "<nixl_connect docs>":
            setattr(Worker, name, value)
    return Worker()


def pattern(n):
    return torch.arange(n, dtype=torch.float32) * 0.5 - 7


def exchange(owner_snippets, peer_snippets, elements, passive, active):
    """Two workers made of the snippets, the owner's passive example against the peer's active
    one over `elements` floats: ``passive(owner, source, target)`` and ``active(peer, remote,
    source, target)`` are their calls. Returns (source, target) once both ended."""

    async def main():
        owner, peer = make_worker(*owner_snippets), make_worker(*peer_snippets)
        owner.peer, peer.peer = peer, owner
        await owner.async_init()
        await peer.async_init()
        source = pattern(elements)
        target = torch.zeros(elements, dtype=torch.float32)

        async def active_side():
            remote = memwire.RdmaMetadata.from_json(await peer.sideband.get())
            await active(peer, remote, source, target)

        await asyncio.wait_for(asyncio.gather(passive(owner, source, target), active_side()), 30)
        return source, target

    return asyncio.run(main())


@pytest.mark.parametrize("init", ["current", "older"])
@pytest.mark.parametrize("passive", ["current", "older"])
@pytest.mark.parametrize("active", ["current", "older"])
def test_readable_then_read(init, passive, active):
    source, target = exchange(
        [CONNECTOR_INIT[init], READABLE[passive]],
        [CONNECTOR_INIT[init], READ[active]],
        1 << 16,
        lambda owner, source, target: owner.send_data(source),
        lambda reader, remote, source, target: reader.read_from_remote(remote, target),
    )
    assert torch.equal(source, target)


@pytest.mark.parametrize("passive", ["current", "older"])
@pytest.mark.parametrize("active", ["current", "older"])
def test_writable_then_write(passive, active):
    source, target = exchange(
        [CONNECTOR_INIT["current"], WRITABLE[passive]],
        [CONNECTOR_INIT["current"], WRITE[active]],
        3 << 16,
        lambda owner, source, target: owner.recv_data(target),
        lambda writer, remote, source, target: writer.write_to_remote(remote, source),
    )
    assert torch.equal(source, target)


def test_import_memwire_as_connect():
    import memwire as connect

    for name in ("Connector", "Descriptor", "Device", "DeviceKind", "OperationKind", "OperationStatus",
                 "RdmaMetadata", "ReadableOperation", "WritableOperation", "ReadOperation", "WriteOperation"):
        assert hasattr(connect, name), name
