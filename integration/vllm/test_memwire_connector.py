"""vLLM's own engine code (Scheduler, KV cache planning and allocation, the connector factory
and the worker-side lifecycle) carrying prefill -> decode KV on MemwireConnector, in separate
processes with a router between them: every loaded position byte-exact before decode's first
forward, prefix hits, concurrency, the lease's end refused and reported through vLLM's
load-error path, heartbeats, abort, a killed prefill."""

import threading
import time

import pytest

import memwire.vllm
from router import EngineProcess, Router, free_port

LEASE = 2.0  # the main pair's prefill lease: short, so that expiry is quick to show


def engines(lease, lease_max, decode_policy="fail", decode_blocks=512, step_seconds=0.0, load_timeout=None):
    port = free_port()
    extra = {"side_channel_port": port, "kv_lease_duration": lease, "kv_lease_max": lease_max}
    if load_timeout:
        extra["kv_load_timeout"] = load_timeout
    prefill = EngineProcess("kv_producer", dict(extra))
    decode = EngineProcess("kv_consumer", dict(extra, side_channel_port=free_port()), policy=decode_policy,
                           num_blocks=decode_blocks, step_seconds=step_seconds)
    return prefill, decode


@pytest.fixture(scope="module")
def pair():
    prefill, decode = engines(LEASE, 60)
    yield Router(prefill, decode)
    prefill.stop()
    decode.stop()


def prompt_of(length, seed):
    return [(seed * 7919 + i * 104729) % 1000 + 1 for i in range(length)]


def assert_exact(result, prompt_length):
    assert result["finish_reason"] == "length", result
    # vLLM computes the prompt's last token again on decode: all before it came from prefill.
    expected = (prompt_length - 1) * 2  # positions x layers
    assert result["checked"] == expected, result
    assert result["mismatched"] == 0, result


def test_vllms_factory_made_memwires_connector_for_both_halves(pair):
    expected = f"{memwire.vllm.MemwireConnector.__module__}.MemwireConnector"
    for engine in (pair.prefill, pair.decode):
        assert engine.ask("connectors") == [expected, expected]


@pytest.mark.parametrize("length", [2, 31, 32, 33, 100, 1024, 4000])
def test_every_loaded_position_is_exact_before_decodes_first_forward(pair, length):
    result = pair.generate(prompt_of(length, length))
    assert_exact(result, length)
    print(f"\n  {length} tokens: decode add -> finish {result['add_to_finish'] * 1e3:.1f} ms")


def test_the_prefill_frees_its_blocks_once_decode_read_them(pair):
    before = pair.prefill.free_blocks()
    result = pair.generate(prompt_of(640, 5))
    assert_exact(result, 640)
    deadline = time.monotonic() + 1.0  # far inside the 2 s lease: freed by decode's done
    while pair.prefill.free_blocks() < before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pair.prefill.free_blocks() >= before


def test_a_prefix_hit_on_decode_loads_only_the_rest(pair):
    shared = prompt_of(256, 99)
    first = pair.generate(shared + prompt_of(100, 1))
    second = pair.generate(shared + prompt_of(300, 2))
    assert_exact(first, 356)
    assert_exact(second, 556)


def assert_exact_in_flight(generate, count, length_of):
    """``count`` requests at once (request i of ``length_of(i)`` tokens), each exact."""
    results = {}

    def run(i):
        results[i] = generate(prompt_of(length_of(i), 1000 + 31 * length_of(i) + i))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert len(results) == count
    for i, result in results.items():
        assert_exact(result, length_of(i))


def test_eight_requests_in_flight(pair):
    assert_exact_in_flight(pair.generate, 8, lambda i: 200 + 97 * i)


def test_an_abort_on_decode_releases_the_prefills_blocks_at_once(pair):
    before = pair.prefill.free_blocks()
    request_id, prefilled = pair.prefill_only(prompt_of(900, 7))
    assert pair.prefill.free_blocks() < before  # held for the decode
    params = prefilled["kv_transfer_params"]
    decode_id = f"{request_id}-aborted"
    future = pair.decode.submit(decode_id, prompt_of(900, 7), dict(params), 4)
    pair.decode.abort(decode_id)
    aborted = future.result(30)
    assert aborted["finish_reason"] == "abort" and aborted["checked"] == 0
    deadline = time.monotonic() + 1.5  # inside the lease: freed by the release, not its end
    while pair.prefill.free_blocks() < before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pair.prefill.free_blocks() >= before


def test_a_read_after_the_lease_is_refused_and_reported_never_computed_on(pair):
    before = pair.prefill.free_blocks()
    result = pair.generate(prompt_of(1024, 11), before_decode=lambda *_: time.sleep(LEASE + 1.5))
    # kv_load_failure_policy "fail": the request ends in error; nothing it held was computed on.
    assert result["finish_reason"] == "error", result
    assert result["checked"] == 0 and result["mismatched"] == 0, result
    # Reported at once (the grant is still found by name and refuses: Expired), not after the
    # load's bound (kv_load_timeout, here the lease: 2 s).
    assert result["add_to_finish"] < LEASE, result
    # The prefill freed (and may reuse) its blocks at the lease's end.
    assert pair.prefill.free_blocks() >= before
    # The pair still works after.
    assert_exact(pair.generate(prompt_of(300, 12)), 300)


@pytest.fixture(scope="module")
def busy_pair():
    """A decode with 64 blocks of 32 tokens and 20 ms of compute a step, whose requests may
    wait longer than the prefill's 1 s lease; kv_load_failure_policy "recompute"."""
    prefill, decode = engines(1.0, 30, decode_policy="recompute", decode_blocks=64, step_seconds=0.02,
                              load_timeout=3.0)
    yield Router(prefill, decode)
    prefill.stop()
    decode.stop()


def test_heartbeats_carry_the_lease_while_decode_is_busy(busy_pair):
    # A occupies 40 of decode's 64 blocks for ~3 s; B (40 blocks) waits for them, and only
    # decode's heartbeats keep the prefill's 1 s lease on B's blocks alive meanwhile.
    a = threading.Thread(target=lambda: busy_pair.generate(prompt_of(1200, 21), max_tokens=150))
    a.start()
    time.sleep(0.5)
    started = time.monotonic()
    b = busy_pair.generate(prompt_of(1200, 22))
    a.join(120)
    assert time.monotonic() - started > 2.0, "B did not wait past the lease: the test proves nothing"
    assert_exact(b, 1200)


def test_an_expired_lease_under_recompute_computes_again_never_on_stale_bytes(busy_pair):
    result = busy_pair.generate(prompt_of(500, 31), before_decode=lambda *_: time.sleep(2.5))
    assert result["finish_reason"] == "length", result
    assert result["mismatched"] == 0, result
    assert result["checked"] == 0, result  # recomputed from scratch: nothing loaded was kept


def test_a_killed_prefill_fails_the_load_within_its_bound(busy_pair):
    request_id, prefilled = busy_pair.prefill_only(prompt_of(700, 41))
    busy_pair.prefill.kill()
    started = time.monotonic()
    result = busy_pair.decode.submit(f"{request_id}-d", prompt_of(700, 41),
                                     dict(prefilled["kv_transfer_params"]), 4).result(60)
    elapsed = time.monotonic() - started
    assert result["mismatched"] == 0 and result["checked"] == 0, result  # recomputed
    assert elapsed < 3.0 + 5.0, elapsed  # the load's bound (3 s) plus the recompute
