"""Threads: every pool call of the Python package takes the pool's lock, reads included. A reader
thread (is_live, free_slots, slot_index, round_open, current_batch, stream) runs beside a thread
whose calls release the GIL and rewrite the pool's host state (begin_verify / abort_round of
batches of 1000 and 2046 rows, release / acquire of another slot). Without the lock on the reads, the reader
copied a batch while begin_verify rewrote it: torn batches (1000 rows with the other batch's
window) and segmentation faults in about half of the runs."""

import threading

import numpy as np

import specstate
from conftest import Model

SLOTS = 2048
ROUNDS = 12000


def test_reads_take_the_pool_lock():
    model = Model(layers=1)
    pool = specstate.StatePool(model.config,
                               specstate.PoolOptions(num_slots=SLOTS, max_rows=SLOTS,
                                                     max_window=4))
    hs = [pool.acquire() for _ in range(SLOTS - 1)]
    small = specstate.VerifyBatch(hs[:1000], window=2)
    large = specstate.VerifyBatch(hs[:-1], window=4)  # 2046 rows
    valid = {(0, 1), (1000, 2), (SLOTS - 2, 4)}
    done = threading.Event()
    problems, counts, failure = [], {"reads": 0, "rounds": 0}, []

    def writer():
        try:
            last = hs[-1]
            for i in range(ROUNDS):
                pool.begin_verify(small if i % 2 else large)
                pool.abort_round()
                if i % 8 == 0:  # the slot allocator changes under the reader too
                    pool.release(last)
                    last = pool.acquire()
                    hs[-1] = last
                counts["rounds"] += 1
        except Exception as e:  # reported by the main thread
            failure.append(e)
        finally:
            done.set()

    def reader():
        try:
            while not done.is_set():
                batch = pool.current_batch
                shape = (len(batch.rows), batch.window)
                if shape not in valid:
                    problems.append(shape)
                pool.round_open()
                free = pool.free_slots()
                if free not in (1, 2):
                    problems.append(("free_slots", free))
                h = hs[0]
                if not pool.is_live(h) or pool.slot_index(h) != 0:
                    problems.append(("slot 0", pool.is_live(h)))
                _ = pool.stream
                counts["reads"] += 1
        except Exception as e:
            failure.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failure, failure
    assert not problems, problems[:8]
    assert counts["rounds"] == ROUNDS
    assert counts["reads"] > 0, "the reader never ran beside the writer"


def test_init_on_two_threads_keeps_the_first_pool_and_refuses_the_second():
    """Two threads calling __init__ on one StatePool object (StatePool.__new__, then __init__
    on each) both passed nanobind's "not yet initialized" check while their pools were built
    without the GIL, and the second placement-new overwrote the first pool, in use by then: it
    leaked, and its handles died. Deterministic: the slow __init__ (over caller-owned arrays)
    waits, inside its reading of committed_conv, until the fast one has finished."""
    m = Model(layers=1)
    c, w = m.cfg.conv_dim(), m.cfg.conv_width
    hv, v, k = m.cfg.num_v_heads, m.cfg.head_v_dim, m.cfg.head_k_dim
    conv = np.zeros((2, c, w - 1), np.float32)
    ssm = np.zeros((2, hv, v, k), np.float32)
    inside, fast_done = threading.Event(), threading.Event()

    class SlowLayers:
        """One layer's array, handed out once the fast __init__ has run."""
        def __len__(self):
            return 1

        def __getitem__(self, i):
            if i != 0:
                raise IndexError(i)
            inside.set()
            assert fast_done.wait(30)
            return conv

    pool = specstate.StatePool.__new__(specstate.StatePool)
    outcome = []

    def slow():
        try:
            pool.__init__(m.config, specstate.PoolOptions(num_slots=2), SlowLayers(), [ssm])
            outcome.append("initialized")
        except TypeError as e:
            outcome.append(str(e))

    t = threading.Thread(target=slow)
    t.start()
    assert inside.wait(30)
    pool.__init__(m.config, specstate.PoolOptions(num_slots=5))
    h = pool.acquire()
    fast_done.set()
    t.join(30)
    assert outcome and "initialized meanwhile" in outcome[0], outcome
    assert pool.free_slots() == 4 and pool.is_live(h)  # the fast pool, still in use
    # The dropped pool let go of the caller's arrays: a pool over them can be built.
    again = specstate.StatePool(m.config, specstate.PoolOptions(num_slots=2), [conv], [ssm])
    assert again.free_slots() == 2
