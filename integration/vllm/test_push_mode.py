"""Push mode (kv_connector_extra_config transfer_mode "push"), on vLLM's own engine code: the
router sends a request to both engines at once; decode grants the request's blocks to the
prefill (writable, for its load bound); the prefill's save_kv_layer streams each layer into
them as soon as the forward computed it; decode's load ends when every layer arrived, and its
grant with it. Every loaded position byte-exact before decode's first forward; a prefill that
never sends fails the load at its bound and nothing lands after; an abort ends the grant before
vLLM frees the blocks."""

import time

import pytest

from router import EngineProcess, Router, free_port
from test_memwire_connector import assert_exact, assert_exact_in_flight, prompt_of

LOAD_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def pushing():
    extra = {"transfer_mode": "push", "kv_load_timeout": LOAD_TIMEOUT}
    decode_port = free_port()
    prefill = EngineProcess("kv_producer", dict(extra, side_channel_port=free_port()))
    decode = EngineProcess("kv_consumer", dict(extra, side_channel_port=decode_port))
    yield Router(prefill, decode, decode_sideband=f"http://127.0.0.1:{decode_port}")
    prefill.stop()
    decode.stop()


@pytest.mark.parametrize("length", [2, 33, 1024, 4000])
def test_pushed_layers_are_exact_before_decodes_first_forward(pushing, length):
    result = pushing.generate_pushed(prompt_of(length, 500 + length))
    assert_exact(result, length)
    print(f"\n  push {length} tokens: decode add -> finish {result['add_to_finish'] * 1e3:.1f} ms")


def test_the_prefill_frees_its_blocks_once_its_layers_are_in(pushing):
    before = pushing.prefill.free_blocks()
    assert_exact(pushing.generate_pushed(prompt_of(640, 77)), 640)
    deadline = time.monotonic() + 2.0
    while pushing.prefill.free_blocks() < before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pushing.prefill.free_blocks() >= before


def test_eight_pushes_in_flight(pushing):
    assert_exact_in_flight(pushing.generate_pushed, 8, lambda i: 150 + 111 * i)


def test_a_prefill_that_never_pushes_fails_the_load_at_its_bound(pushing):
    started = time.monotonic()
    result = pushing.generate_pushed(prompt_of(700, 91), prefill=False, timeout=60)
    elapsed = time.monotonic() - started
    # kv_load_failure_policy "fail": the request ends in error; nothing was computed on.
    assert result["finish_reason"] == "error", result
    assert result["checked"] == 0 and result["mismatched"] == 0, result
    assert LOAD_TIMEOUT - 0.5 < elapsed < LOAD_TIMEOUT + 2.0, elapsed
    assert_exact(pushing.generate_pushed(prompt_of(300, 92)), 300)  # the pair still works


def test_an_abort_on_decode_ends_its_grant_before_its_blocks_are_freed(pushing):
    before = pushing.decode.free_blocks()
    decode_id = "pushed-then-aborted"
    future = pushing.decode.submit(decode_id, prompt_of(900, 93), {"do_remote_prefill": True,
                                                                  "memwire_push": decode_id}, 4)
    time.sleep(0.3)  # allocated and granted: WAITING_FOR_REMOTE_KVS
    assert pushing.decode.free_blocks() < before
    pushing.decode.abort(decode_id)
    aborted = future.result(30)
    assert aborted["finish_reason"] == "abort" and aborted["checked"] == 0
    deadline = time.monotonic() + 2.0  # freed once the grant ended, far inside the load bound
    while pushing.decode.free_blocks() < before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pushing.decode.free_blocks() >= before
    # The prefill pushing it now finds the grant gone: refused, nothing lands, and it frees.
    prefill_before = pushing.prefill.free_blocks()
    pushing.prefill.submit(decode_id, prompt_of(900, 93), {
        "do_remote_decode": True, "memwire_push": decode_id,
        "memwire_push_to": pushing.decode_sideband}, 1).result(30)
    deadline = time.monotonic() + LOAD_TIMEOUT + 2.0
    while pushing.prefill.free_blocks() < prefill_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pushing.prefill.free_blocks() >= prefill_before
    assert_exact(pushing.generate_pushed(prompt_of(400, 94)), 400)  # and decode's blocks are sound
