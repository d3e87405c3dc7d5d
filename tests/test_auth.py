"""PYCOLLECT_SECRET: the handshake's HMAC against hashlib, a group whose ranks share a
secret, ranks whose secrets differ (a clear error on every rank, within seconds), and a
stranger who read the token from the store but lacks the secret."""
import hashlib
import hmac
import os
import socket
import struct
import threading
import time

import pytest
import torch

import pycollect as pc
from pycollect import _C
from rank_pool import RankPool, next_group_address, next_group_name

SECRET = "correct horse battery staple"
AUTH_FAILED = "secrets differ or only one side has PYCOLLECT_SECRET"

# -- HMAC-SHA256 ----------------------------------------------------------------------


def test_hmac_sha256_rfc4231_case_2():
    digest = _C.hmac_sha256(b"Jefe", b"what do ya want for nothing?")
    assert digest.hex() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"


@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 131])
@pytest.mark.parametrize("msg_len", [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 100_003])
def test_hmac_sha256_matches_hashlib(key_len, msg_len):
    # Message lengths around the padding boundaries (55/56 bytes mod 64) and keys
    # shorter than, equal to and longer than a block (hashed first).
    key, msg = os.urandom(key_len), os.urandom(msg_len)
    assert _C.hmac_sha256(key, msg) == hmac.new(key, msg, hashlib.sha256).digest()


# -- worker functions ------------------------------------------------------------------


class _RecordingStore:
    """Wraps the store and keeps every value written through it."""

    def __init__(self, store):
        self._store, self.values = store, []

    def set(self, key, value):
        self.values.append(value if isinstance(value, bytes) else str(value).encode())
        return self._store.set(key, value)

    def __getattr__(self, name):
        return getattr(self._store, name)


def case_group_with_secret():
    from pycollect import world

    real, world.store = world.store, _RecordingStore(world.store)
    try:
        g = pc.new_group(list(range(pc.get_world_size())))
    finally:
        recorded, world.store = world.store.values, real
    t = torch.full((1000,), float(pc.get_rank()))
    pc.all_reduce(t, group=g)
    pc.destroy_process_group(g)
    n = pc.get_world_size()
    return bool(torch.all(t == n * (n - 1) / 2)), any(SECRET.encode() in v for v in recorded)


def case_new_group_with_secret(secrets):
    """new_group with this rank's PYCOLLECT_SECRET taken from `secrets` (None: unset)."""
    mine, saved = secrets[pc.get_rank()], os.environ.pop("PYCOLLECT_SECRET", None)
    if mine is not None:
        os.environ["PYCOLLECT_SECRET"] = mine
    t0 = time.perf_counter()
    try:
        g = pc.new_group(list(range(pc.get_world_size())))
        pc.destroy_process_group(g)
        return "formed", time.perf_counter() - t0
    except pc.PyCollectError as e:
        return str(e), time.perf_counter() - t0
    finally:
        os.environ.pop("PYCOLLECT_SECRET", None)
        if saved is not None:
            os.environ["PYCOLLECT_SECRET"] = saved


def _greet_as_rank_0(addr, token: int, with_secret: bool):
    """A stranger that read the token from the store greets rank 2 as rank 0."""
    s = socket.create_connection(addr, timeout=15)
    s.sendall(struct.pack("<IIQiiII", 0x4C4F4350, 2, token, 0, 2, int(with_secret), 0)
              + (os.urandom(32) if with_secret else b""))
    return s


def _shut_out(s, with_secret: bool) -> bool:
    """Reads rank 2's answer (proving a made-up secret if asked to); True once rank 2 hangs up."""
    answer = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return True
            answer += chunk
            if len(answer) >= 32 + 64 and with_secret:
                s.sendall(os.urandom(32))  # a proof made up without the secret
                with_secret = False
    except ConnectionResetError:
        return True
    finally:
        s.close()


def case_stranger_with_token():
    """A thread of rank 1 queues two strangers that know the token (read from the store) but
    not the secret on rank 2's port before rank 1 joins, so they are handled while the real
    ranks connect; then the group must form anyway."""
    import datetime

    from pycollect import world
    from pycollect.formation import store_scope

    name, outcome = next_group_name(), {}
    if pc.get_rank() == 1:
        queued = threading.Event()

        def strangers():
            addr = next_group_address(2, name)
            key = f"{store_scope(name)}/token"
            world.store.wait([key], datetime.timedelta(seconds=15))
            token = int(world.store.get(key).decode())
            plain = _greet_as_rank_0(addr, token, with_secret=False)
            proving = _greet_as_rank_0(addr, token, with_secret=True)
            queued.set()
            outcome["without_secret_refused"] = _shut_out(plain, False)
            outcome["wrong_proof_refused"] = _shut_out(proving, True)

        th = threading.Thread(target=strangers)
        th.start()
        queued.wait(15)
    g = pc.new_group(list(range(pc.get_world_size())))
    t = torch.ones(1000)
    pc.all_reduce(t, group=g)
    outcome["sum_ok"] = bool(torch.all(t == pc.get_world_size()))
    pc.destroy_process_group(g)
    if pc.get_rank() == 1:
        th.join(15)
    return outcome


# -- tests -----------------------------------------------------------------------------


def test_group_with_secret_forms_and_stranger_with_token_is_refused():
    with RankPool(3, init_gloo=False, env={"PYCOLLECT_SECRET": SECRET}) as pool:
        for ok, leaked in pool.run(case_group_with_secret):
            assert ok
            assert not leaked, "the secret was written to the store"
        r0, r1, r2 = pool.run(case_stranger_with_token, timeout=60)
        assert r1 == {"without_secret_refused": True, "wrong_proof_refused": True, "sum_ok": True}
        assert r0 == r2 == {"sum_ok": True}


@pytest.mark.parametrize("secrets", [("a", "a", "b"), ("a", "a", None), (None, "a", "a")],
                         ids=["different", "last-has-none", "first-has-none"])
def test_ranks_whose_secrets_differ_fail_fast_and_clearly(pool_3_bare, secrets):
    outcomes = pool_3_bare.run(case_new_group_with_secret, secrets, timeout=60)
    for rank, (message, seconds) in enumerate(outcomes):
        assert "authentication failed with rank" in message and AUTH_FAILED in message, f"rank {rank}: {message}"
        assert seconds < 5.0, f"rank {rank} took {seconds:.1f} s to fail"


@pytest.fixture(scope="module")
def pool_3_bare():
    with RankPool(3, init_gloo=False) as pool:
        yield pool
