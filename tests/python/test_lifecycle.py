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
    # Read after the export (the views materialize the source): the round reached the state.
    assert any(np.any(s != 0) for _, s in slot_state(dst, model, g))
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


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_close_refuses_while_a_zero_copy_view_is_alive_and_changes_nothing(strategy):
    """A view of the pool's memory (and any array made from it) would dangle once close() freed
    it: close() names how many are alive, raises FailedPreconditionError and leaves the pool open
    and its state as it was; once they are dropped it closes."""
    model = Model(act=DType.F32)
    pool = model.pool(strategy)
    h = pool.acquire()
    one_round(pool, model, h, model.inputs(3), 2)
    before = slot_state(pool, model, h)
    assert any(np.any(s != 0) for _, s in before)
    view = pool.ssm_state(0)                       # the view object itself
    conv = specstate.to_numpy(pool.conv_state(0, h))  # an array made from a dropped view
    scratch = (pool.snapshot_ssm(0) if strategy == Strategy.SNAPSHOT
               else pool.workspace(specstate.Workspace.RECORDS, 0))
    with pytest.raises(specstate.FailedPreconditionError, match=r"close\(\): 3 zero-copy view"):
        pool.close()
    assert not pool.closed
    del scratch
    with pytest.raises(specstate.FailedPreconditionError, match=r"2 zero-copy view"):
        pool.close()
    assert not pool.closed
    for (gc, gs), (wc, ws) in zip(slot_state(pool, model, h), before):
        assert np.array_equal(gc, wc) and np.array_equal(gs, ws)
    assert np.array_equal(bits(conv), before[0][0])  # the views still read the pool's memory
    assert np.array_equal(bits(specstate.to_numpy(view)[pool.slot_index(h)]), before[0][1])
    one_round(pool, model, h, model.inputs(3), 1)  # and the pool still runs rounds
    del view, conv
    pool.close()
    assert pool.closed


def test_a_with_block_with_a_live_view_raises_and_the_pool_stays_open():
    config = specstate.ModelConfig.gated_delta_net(1, layer_config())
    opts = specstate.PoolOptions(num_slots=1, max_rows=1, max_window=2)
    with pytest.raises(specstate.FailedPreconditionError, match=r"1 zero-copy view"):
        with specstate.StatePool(config, opts) as pool:
            kept = specstate.to_numpy(pool.ssm_state(0))
    assert not pool.closed and pool.free_slots() == 1
    del kept
    pool.close()
    assert pool.closed


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
