"""Request grants from Python (counterpart of request_grant_conformance_test.cpp), over tcp and
shm: a peer moves the blocks granted for its request and nothing else; after close() or after
the lease nothing lands, and the error names the request."""

import time

import numpy as np
import pytest

import memwire
from block_pools import block_pools

TRANSPORTS = ["tcp", "shm"]
BLOCK = 1024
BLOCKS = 16


@pytest.fixture(params=TRANSPORTS)
def side(request):
    """(owner's memory, owner's pool, peer connector, peer's pool) with the peer's blocks 'p'."""
    with block_pools(request.param, BLOCKS, BLOCK) as pools:
        yield pools


def block(memory, index):
    return memory[index * BLOCK:(index + 1) * BLOCK]


def is_(memory, index, value):
    return bool((block(memory, index) == value).all())


def test_a_write_inside_the_grant_lands_and_its_tag_names_peer_and_request(side):
    there, pool, peer, local, _ = side
    with pool.grant("prefill", "req-1", [2, 3, 7], access="write", lease=30) as grant:
        assert grant.peer == "prefill" and grant.request == "req-1" and not grant.closed
        assert 0 < grant.expires_in <= 30
        scope = grant.metadata.to_dict()
        metadata = memwire.PoolMetadata.from_json(grant.metadata.to_json())  # survives JSON
        assert metadata == grant.metadata and "req-1" in str(scope)
        peer.write_blocks(local, [(3, 0)], metadata, tag="req-1/0").wait(20)
        n = pool.wait_for_tag("req-1/0", timeout=10)
        assert (n.peer, n.authenticated, n.request) == ("prefill", True, "req-1")
        assert is_(there, 3, ord("p")) and is_(there, 4, 0)
    assert grant.closed


def test_a_write_outside_the_granted_blocks_is_refused_with_nothing_landed(side):
    there, pool, peer, local, _ = side
    with pool.grant("prefill", "req-1", np.array([2, 3, 7]), access="write", lease=30) as grant:
        for b in (0, 4, 6, 8, 15):
            with pytest.raises(memwire.AccessDeniedError):
                peer.write_blocks(local, [(b, 0)], grant.metadata, tag="t").wait(20)
            assert is_(there, b, 0), b
        # A run that starts inside the grant and leaves it is refused whole.
        with pytest.raises(memwire.AccessDeniedError):
            peer.write_blocks(local, [(3, 0), (4, 1)], grant.metadata).wait(20)
        assert is_(there, 3, 0) and is_(there, 4, 0)


def test_a_late_write_after_close_is_refused_with_nothing_landed(side):
    there, pool, peer, local, _ = side
    grant = pool.grant("prefill", "req-9", [5], lease=30)
    metadata = grant.metadata
    peer.write_blocks(local, [(5, 0)], metadata).wait(20)
    block(there, 5)[:] = 0
    grant.close("decode aborted it")
    assert grant.closed
    grant.close()  # idempotent: the first reason stays
    with pytest.raises(memwire.MemwireError, match="blocks released by the owner for request req-9"):
        peer.write_blocks(local, [(5, 0)], metadata, tag="req-9/1").wait(20)
    assert is_(there, 5, 0), "a late write landed after close"
    with pytest.raises(memwire.TimeoutError):
        pool.wait_for_tag("req-9/1", timeout=0.3)


def test_a_write_after_the_lease_is_refused_with_nothing_landed(side):
    there, pool, peer, local, _ = side
    grant = pool.grant("prefill", "req-2", [1], lease=0.3)
    peer.write_blocks(local, [(1, 0)], grant.metadata).wait(20)
    block(there, 1)[:] = 0
    time.sleep(0.6)
    with pytest.raises(memwire.MemwireError, match="lease"):
        peer.write_blocks(local, [(1, 0)], grant.metadata).wait(20)
    assert is_(there, 1, 0), "a write landed after the lease"


def test_expired_is_the_lease_end_as_a_fence(side):
    there, pool, peer, local, _ = side
    grant = pool.grant("prefill", "req-5", [1], lease=0.3)
    assert not grant.expired() and not grant.closed
    time.sleep(0.4)
    assert grant.expired()  # the grant ended as close() ends it, its requests in
    assert grant.closed
    with pytest.raises(memwire.ExpiredError, match="lease"):
        peer.write_blocks(local, [(1, 0)], grant.metadata).wait(20)
    assert is_(there, 1, 0), "a write landed after the lease"


def test_a_read_grant_allows_no_write(side):
    there, pool, peer, local, here = side
    with pool.grant("prefill", "req-3", [0], access="read", lease=30) as grant:
        with pytest.raises(memwire.AccessDeniedError):
            peer.write_blocks(local, [(0, 0)], grant.metadata).wait(20)
        assert is_(there, 0, 0)
        block(there, 0)[:] = ord("d")
        peer.read_blocks(grant.metadata, [(0, 1)], local).wait(20)
        assert is_(here, 1, ord("d"))


def test_dropping_the_grant_closes_it(side):
    there, pool, peer, local, _ = side
    metadata = pool.grant("prefill", "req-4", [9], lease=30).metadata  # the grant is dropped
    with pytest.raises(memwire.CancelledError):
        peer.write_blocks(local, [(9, 0)], metadata).wait(20)
    assert is_(there, 9, 0)


def test_live_grants_per_pool_are_capped(side):
    _, _, peer, _, _ = side
    memory = bytearray(4 * BLOCK)
    with peer.register_pool((memory, BLOCK), max_request_grants=2) as pool:
        first = pool.grant("prefill", "a", [0])
        second = pool.grant("prefill", "b", [1])
        with pytest.raises(memwire.InvalidArgumentError):
            pool.grant("prefill", "c", [2])
        first.close()
        third = pool.grant("prefill", "c", [2])
        assert not third.closed and not second.closed


def test_bad_grants_are_refused(side):
    _, pool, _, _, _ = side
    for peer, request, blocks, access, lease in [
        ("prefill", "r", [], "write", 1),
        ("prefill", "r", [BLOCKS], "write", 1),
        ("prefill", "", [0], "write", 1),
        ("prefill", "r", [0], "write", 0),
        ("prefill", "r", [-1], "write", 1),
        ("prefill", "r", [0], "append", 1),
    ]:
        with pytest.raises(memwire.InvalidArgumentError):
            pool.grant(peer, request, blocks, access=access, lease=lease)


def test_a_renewed_lease_admits_writes_past_its_first_end_and_never_past_the_bound(side):
    there, pool, peer, local, _ = side
    with pool.grant("decode", "req-h", [5], access="write", lease=0.5, max_lease=1.5) as grant:
        assert grant.renew_limit_in == pytest.approx(1.5, abs=0.2)
        peer.write_blocks(local, [(5, 0)], grant.metadata).wait(20)
        block(there, 5)[:] = 0
        assert grant.renew(1.0) == pytest.approx(1.0, abs=0.2)  # a heartbeat
        time.sleep(0.7)  # past the first end
        assert not grant.expired()
        peer.write_blocks(local, [(5, 0)], grant.metadata).wait(20)
        assert is_(there, 5, ord("p"))
        block(there, 5)[:] = 0
        assert grant.renew(60) <= 1.5  # never past max_lease from the grant's making
        time.sleep(max(0.0, grant.renew_limit_in) + 0.2)
        with pytest.raises(memwire.ExpiredError):
            grant.renew(1.0)  # a lease that ended is not revived
        with pytest.raises(memwire.MemwireError):
            peer.write_blocks(local, [(5, 0)], grant.metadata).wait(20)
        assert is_(there, 5, 0)
        assert grant.expired()


def test_a_closed_grant_or_a_bad_renewal_is_refused(side):
    _, pool, _, _, _ = side
    grant = pool.grant("decode", "req-c", [1], access="read", lease=5, max_lease=10)
    with pytest.raises(memwire.InvalidArgumentError):
        grant.renew(0)
    grant.close("decode is done")
    with pytest.raises(memwire.CancelledError):
        grant.renew(1)
    with pytest.raises(memwire.InvalidArgumentError):
        pool.grant("decode", "r", [0], access="read", lease=2, max_lease=1)
