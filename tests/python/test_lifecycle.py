"""The round lifecycle and slot operations through the Python package (CPU backend): abort_round,
fork / copy_slot / reset, export / import through a safetensors file across strategies."""

import numpy as np
import pytest

import specstate
from specstate import DType, Strategy
from conftest import Model, bits, layer_config, states

STRATEGIES = [Strategy.SNAPSHOT, Strategy.REPLAY]


def one_round(pool, model, handle, window, accepted, T=3):
    pool.begin_verify(specstate.VerifyBatch([handle], window=T))
    for layer, (x, a, b) in enumerate(window):
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), model.outputs(T))
    pool.commit([accepted])


def slot_state(pool, model, handle):
    i = pool.slot_index(handle)
    return [(bits(c[i]).copy(), bits(s[i]).copy()) for c, s in states(pool, model.layers)]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_abort_round_and_begin_over_a_verified_round(strategy):
    model = Model(act=DType.F32)
    pool = model.pool(strategy)
    h = pool.acquire()
    window = model.inputs(3)
    pool.begin_verify(specstate.VerifyBatch([h], window=3))
    x, a, b = window[0]
    pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), model.outputs(3))
    assert pool.round_open()
    with pytest.raises(specstate.Error, match="abort_round"):
        pool.begin_verify(specstate.VerifyBatch([h], window=3))
    pool.abort_round()
    assert not pool.round_open()
    with pytest.raises(specstate.Error):
        pool.abort_round()  # none open


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_fork_then_diverge_equals_two_independent_runs(strategy):
    model = Model(act=DType.F32)
    pool, ref = model.pool(strategy), model.pool(strategy)
    h, r1, r2 = pool.acquire(), ref.acquire(), ref.acquire()
    w0, w1, w2 = model.inputs(3), model.inputs(3), model.inputs(3)
    one_round(pool, model, h, w0, 2)
    for r in (r1, r2):
        one_round(ref, model, r, w0, 2)
    f = pool.fork(h)
    one_round(pool, model, h, w1, 3)
    one_round(pool, model, f, w2, 1)
    one_round(ref, model, r1, w1, 3)
    one_round(ref, model, r2, w2, 1)
    for (gc, gs), (wc, ws) in zip(slot_state(pool, model, h), slot_state(ref, model, r1)):
        assert np.array_equal(gc, wc) and np.array_equal(gs, ws)
    for (gc, gs), (wc, ws) in zip(slot_state(pool, model, f), slot_state(ref, model, r2)):
        assert np.array_equal(gc, wc) and np.array_equal(gs, ws)
    assert any(np.any(s != 0) for _, s in slot_state(pool, model, f))


def test_export_import_file_round_trips_across_strategies(tmp_path):
    model = Model(act=DType.BF16)
    src, dst = model.pool(Strategy.REPLAY), model.pool(Strategy.SNAPSHOT)
    h, g = src.acquire(), dst.acquire()
    one_round(src, model, h, model.inputs(3), 3)  # replay: pending when exported
    path = str(tmp_path / "slot.safetensors")
    src.export_slot(h, path)
    dst.import_slot(g, path)
    assert src.slot_state_bytes() == dst.slot_state_bytes() > 0
    for (gc, gs), (wc, ws) in zip(slot_state(dst, model, g), slot_state(src, model, h)):
        assert np.array_equal(gc, wc) and np.array_equal(gs, ws)
    dst.reset(g)
    assert all(not np.any(s) for _, s in slot_state(dst, model, g))
    with pytest.raises(specstate.Error):
        dst.import_slot(g, str(tmp_path / "missing.safetensors"))


def test_close_frees_the_pool_and_every_later_call_names_it():
    """close() frees the pool now (without the GIL); afterwards each call raises
    FailedPreconditionError naming close(), and close() again does nothing."""
    config = specstate.ModelConfig.gated_delta_net(2, layer_config())
    pool = specstate.StatePool(config, specstate.PoolOptions(num_slots=2, max_rows=2,
                                                             max_window=2))
    h = pool.acquire()
    pool.begin_verify(specstate.VerifyBatch([h], window=2))  # an open round does not stop it
    assert not pool.closed
    pool.close()
    assert pool.closed
    pool.close()
    for call in (pool.acquire, pool.free_slots, lambda: pool.is_live(h), lambda: pool.config,
                 lambda: pool.release(h), pool.abort_round):
        with pytest.raises(specstate.FailedPreconditionError, match=r"the pool is closed"):
            call()


def test_a_with_block_closes_the_pool_and_its_exception_propagates():
    config = specstate.ModelConfig.gated_delta_net(1, layer_config())
    opts = specstate.PoolOptions(num_slots=1, max_rows=1, max_window=2)
    with specstate.StatePool(config, opts) as pool:
        assert pool.acquire().slot == 0
    assert pool.closed
    with pytest.raises(KeyError, match="inside"):
        with specstate.StatePool(config, opts) as other:
            raise KeyError("inside")
    assert other.closed
