"""Layer streams from Python (counterpart of layer_cancel_conformance_test.cpp and the pool
tests' layer streams), over tcp and shm: layers arrive in order after their bytes; decode's
cancel() closes the request's grant so prefill's transfers fail at once with nothing landed;
prefill's cancel() ends decode's waits with Cancelled and its reason."""

import threading
import time

import pytest

import memwire
from block_pools import block_pools

TRANSPORTS = ["tcp", "shm"]
BLOCK = 1024
BLOCKS = 8


@pytest.fixture(params=TRANSPORTS)
def pair(request):
    """(decode's memory, decode's pool, prefill's connector, prefill's pool)."""
    with block_pools(request.param, BLOCKS, BLOCK) as (there, pool, prefill, local, _):
        yield there, pool, prefill, local


def is_(memory, index, value):
    return bool((memory[index * BLOCK:(index + 1) * BLOCK] == value).all())


def test_layer_tag_is_the_stream_and_the_layer():
    assert memwire.layer_tag("req-1", 3) == "req-1/3"


def test_layers_arrive_after_their_bytes(pair):
    there, pool, prefill, local = pair
    receiver = memwire.LayerReceiver(pool, "req-1", from_peer="prefill")
    sender = memwire.LayerSender(prefill, local, pool.metadata, "req-1")
    for layer in range(4):
        sender.send(layer, [(layer, layer)])
    assert sender.layers_sent == 4
    for layer in range(4):
        receiver.wait(layer, timeout=10)
        assert is_(there, layer, ord("p"))
    sender.finish(timeout=10)
    with pytest.raises(memwire.TimeoutError):
        receiver.wait(4, timeout=0.2)
    with pytest.raises(memwire.InvalidArgumentError):
        receiver.grant_metadata


def test_a_sliced_layer_moves_its_share(pair):
    there, pool, prefill, local = pair
    receiver = memwire.LayerReceiver(pool, "req-s")
    sender = memwire.LayerSender(prefill, local, pool.metadata, "req-s")
    sender.send(0, [(0, 0), (1, 1, 0, 0)], slice=(BLOCK // 2, 0, BLOCK // 2))
    receiver.wait(0, timeout=10)
    sender.finish(timeout=10)
    for b in (0, 1):
        half = there[b * BLOCK:(b + 1) * BLOCK]
        assert (half[:BLOCK // 2] == 0).all() and (half[BLOCK // 2:] == ord("p")).all()


def test_a_receivers_cancel_closes_the_grant_and_the_senders_transfers_fail_at_once(pair):
    there, pool, prefill, local = pair
    grant = pool.grant("prefill", "req-7", [0, 1, 2, 3], access="write", lease=30)
    receiver = memwire.LayerReceiver(pool, grant, "req-7")
    assert grant.held_by_receiver and grant.closed  # it moved into the receiver
    grant.close()  # nothing left here to close
    assert receiver.grant_metadata == grant.metadata
    sender = memwire.LayerSender(prefill, local, receiver.grant_metadata, "req-7")
    sender.send(0, [(0, 0)])
    receiver.wait(0, timeout=20)
    assert is_(there, 0, ord("p"))

    receiver.cancel("decode evicted the request")
    started = time.monotonic()
    sender.send(1, [(1, 1)])
    with pytest.raises(memwire.CancelledError, match="blocks released by the owner for request req-7"):
        sender.finish(timeout=30)
    assert time.monotonic() - started < 10, "failed at its deadline, not at once"
    assert is_(there, 1, 0), "a byte landed after the cancel"
    with pytest.raises(memwire.CancelledError, match="decode evicted the request"):
        receiver.wait(1, timeout=5)
    receiver.cancel("again")  # idempotent


def test_a_receivers_cancel_ends_its_waits_on_other_threads(pair):
    _, pool, _, _ = pair
    receiver = memwire.LayerReceiver(pool, pool.grant("prefill", "req-5", [0], lease=30), "req-5")
    errors = []

    def wait():
        try:
            receiver.wait(5, timeout=30)
        except memwire.MemwireError as error:
            errors.append(error)

    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.1)
    receiver.cancel("client went away")
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], memwire.CancelledError)
    assert "client went away" in str(errors[0])


def test_a_senders_cancel_ends_decodes_waits_with_its_reason(pair):
    there, pool, prefill, local = pair
    receiver = memwire.LayerReceiver(pool, "req-c")
    sender = memwire.LayerSender(prefill, local, pool.metadata, "req-c")
    sender.send(0, [(0, 0)])
    receiver.wait(0, timeout=10)
    sender.cancel("prefill preempted")
    with pytest.raises(memwire.CancelledError, match="prefill preempted"):
        sender.send(1, [(1, 1)])
    with pytest.raises(memwire.CancelledError):
        sender.finish(timeout=1)
    sender.cancel("twice")  # idempotent
    assert is_(there, 1, 0)


def test_a_cancelled_sender_sends_nothing_more(pair):
    there, pool, prefill, local = pair
    sender = memwire.LayerSender(prefill, local, pool.metadata, "req-3")
    sender.cancel("prefill preempted")
    with pytest.raises(memwire.CancelledError):
        sender.send(0, [(0, 0)])
    with pytest.raises(memwire.CancelledError):
        sender.send(0, [(0, 0)], slice=(0, 0, BLOCK))
    with pytest.raises(memwire.CancelledError):
        sender.finish(timeout=1)
    assert is_(there, 0, 0)


def test_a_block_transfers_cancel_reason_reaches_the_owners_wait(pair):
    _, pool, prefill, local = pair
    op = prefill.write_blocks(local, [(i % BLOCKS, i % BLOCKS) for i in range(1)], pool.metadata,
                              tag="t-1")
    op.cancel("changed my mind")
    try:
        n = pool.wait_for_tag("t-1", timeout=5)
    except memwire.CancelledError as error:
        assert "changed my mind" in str(error)
    else:  # it completed before the cancel: the tag came
        assert n.tag == "t-1"


def test_bad_receivers_and_senders_are_refused(pair):
    _, pool, prefill, local = pair
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.LayerSender(prefill, local, pool.metadata, "x" * 400)
    grant = pool.grant("prefill", "req-g", [0], lease=30)
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.LayerReceiver(pool, grant)  # the stream is missing
    memwire.LayerReceiver(pool, grant, "req-g")
    with pytest.raises(memwire.InvalidArgumentError):
        memwire.LayerReceiver(pool, grant, "req-g")  # the grant moved to the first one


def test_closed_streams_refuse_calls(pair):
    _, pool, prefill, local = pair
    with memwire.LayerSender(prefill, local, pool.metadata, "req-x") as sender:
        pass
    with memwire.LayerReceiver(pool, "req-x") as receiver:
        pass
    with pytest.raises(memwire.InvalidArgumentError):
        sender.send(0, [(0, 0)])
    with pytest.raises(memwire.InvalidArgumentError):
        receiver.wait(0, timeout=1)
