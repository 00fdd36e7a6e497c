"""Threads: every pool call of the Python package takes the pool's lock, reads included. A reader
thread (is_live, free_slots, slot_index, round_open, current_batch, stream) runs beside a thread
whose calls release the GIL and rewrite the pool's host state (begin_verify / abort_round of
batches of 1000 and 2046 rows, release / acquire of another slot). Without the lock on the reads, the reader
copied a batch while begin_verify rewrote it: torn batches (1000 rows with the other batch's
window) and segmentation faults in about half of the runs."""

import threading

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
