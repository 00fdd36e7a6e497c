"""Variable windows and batched prefill through the Python package (CPU backend): a round whose
rows verify different numbers of tokens, packed with no filler, equals the uniform round with
filler tokens; prefill_batch equals one prefill per request; a commit past a row's own window
is rejected, naming the row."""

import numpy as np
import pytest

import specstate
from specstate import Strategy
from conftest import Model, bits, states


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
def test_packed_rows_equal_uniform_window(strategy):
    model = Model(seed=7)
    uni, var = model.pool(strategy), model.pool(strategy)
    hu = [uni.acquire() for _ in range(3)]
    hv = [var.acquire() for _ in range(3)]
    lengths = [3, 0, 2]
    prompt = model.inputs(sum(lengths))
    for layer, (x, a, b) in enumerate(prompt):
        var.prefill_batch(layer, hv, lengths, model.weights[layer], specstate.GdnInputs(x, a, b),
                          model.outputs(sum(lengths)))
        at = 0
        for h, n in zip(hu, lengths):
            if n:
                uni.prefill(layer, h, model.weights[layer],
                            specstate.GdnInputs(x[at:at + n], a[at:at + n], b[at:at + n]),
                            model.outputs(n))
            at += n
    T, win = 4, [4, 1, 2]
    real = [r * T + t for r, n in enumerate(win) for t in range(n)]
    uni.begin_verify(specstate.VerifyBatch(hu, window=T))
    var.begin_verify(specstate.VerifyBatch(hv, window=T, lengths=win))
    for layer, (x, a, b) in enumerate(model.inputs(3 * T)):
        ou, ov = model.outputs(3 * T), model.outputs(sum(win))
        uni.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), ou)
        var.verify(layer, model.weights[layer],
                   specstate.GdnInputs(x[real], a[real], b[real]), ov)
        assert np.array_equal(bits(np.asarray(ou.core_out)[real]), bits(ov.core_out))
        assert np.abs(np.asarray(ov.core_out, dtype=np.float32)).sum() > 0
    with pytest.raises(specstate.Error, match=r"accepted\[1\] = 2.*row 1 verified 1 tokens"):
        var.commit([4, 2, 2])
    uni.commit([4, 1, 2])
    var.commit([4, 1, 2])
    for (cu, su), (cv, sv) in zip(states(uni, model.layers), states(var, model.layers)):
        assert np.array_equal(bits(cu), bits(cv)) and np.array_equal(bits(su), bits(sv))


def test_builder_variable_packing():
    builder = specstate.VerifyBatchBuilder([1, 2, 4], specstate.Packing.VARIABLE)
    model = Model(seed=2)
    pool = model.pool(Strategy.REPLAY)
    hs = [pool.acquire() for _ in range(3)]
    for handle, n in zip(hs, [3, 1, 2]):
        builder.add(handle, specstate.Window.chain(n))
    plan = builder.build()
    assert plan.batch.lengths == [3, 1, 2, 0] and plan.token_offsets == [0, 3, 4, 6, 6]
    assert plan.num_tokens() == 6
    pool.begin_verify(plan.batch)
    for layer, (x, a, b) in enumerate(model.inputs(6)):
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), model.outputs(6))
    pool.commit(plan.commit_lengths([3, 1, 0]))


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
def test_pool_over_caller_owned_arrays(strategy):
    """An engine's own [L, slots, ...] arrays (padded slot stride) adopted by a pool: the same
    states as an owning pool, written in place, padding untouched."""
    model = Model(seed=4)
    cfg, L, slots = model.cfg, model.layers, 4
    c, w = cfg.conv_dim(), cfg.conv_width
    hv, v, k = cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim
    conv_all = np.full((L, slots, c * (w - 1) + 8), 7.0, np.float32)  # 8 padding elements/slot
    ssm_all = np.full((L, slots, hv * v * k + 4), 7.0, np.float32)
    conv_views = [conv_all[l, :, :c * (w - 1)].reshape(slots, c, w - 1) for l in range(L)]
    ssm_views = [ssm_all[l, :, :hv * v * k].reshape(slots, hv, v, k) for l in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=4, max_window=4, strategy=strategy)
    caller = specstate.StatePool(model.config, opts, committed_conv=conv_views,
                                 committed_ssm=ssm_views)
    own = model.pool(strategy, slots=slots)
    hc, ho = caller.acquire(), own.acquire()
    for layer, (x, a, b) in enumerate(model.inputs(3)):
        for pool, h in ((caller, hc), (own, ho)):
            pool.prefill(layer, h, model.weights[layer], specstate.GdnInputs(x, a, b),
                         model.outputs(3))
    for pool, h in ((caller, hc), (own, ho)):
        pool.begin_verify(specstate.VerifyBatch([h], window=4))
    for layer, (x, a, b) in enumerate(model.inputs(4)):
        for pool in (caller, own):
            pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b),
                        model.outputs(4))
    caller.commit([3])
    own.commit([3])
    slot = caller.slot_index(hc)
    assert slot == own.slot_index(ho)
    for (cc, sc), (co, so) in zip(states(caller, L), states(own, L)):
        assert np.array_equal(bits(cc[slot]), bits(co[slot]))
        assert np.array_equal(bits(sc[slot]), bits(so[slot]))
    # The pool wrote the caller's arrays in place.
    assert np.array_equal(bits(conv_views[0][slot]), bits(states(own, L)[0][0][slot]))
    assert np.abs(ssm_views[1][slot]).sum() > 0
    assert (conv_all[:, :, c * (w - 1):] == 7.0).all() and (ssm_all[:, :, hv * v * k:] == 7.0).all()
    assert (conv_all[:, slot + 1:] == 7.0).all()  # slots never acquired are untouched
    with pytest.raises(specstate.Error, match=r"committed\.conv\[1\]"):
        bad = [conv_views[0], conv_views[0][:2]]
        specstate.StatePool(model.config, opts, committed_conv=bad, committed_ssm=ssm_views)


def test_device_cu_seqlens_needs_a_cuda_pool():
    model = Model(seed=5)
    pool = model.pool(Strategy.SNAPSHOT)
    h = pool.acquire()
    with pytest.raises(specstate.Error, match=r"batch\.cu_seqlens.*device memory of a cuda pool"):
        pool.begin_verify(specstate.VerifyBatch([h], window=2),
                          cu_seqlens=np.array([0, 2], np.int32))
    assert not pool.round_open()
