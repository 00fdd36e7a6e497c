"""Tensor-parallel shards from Python (specstate.shard_map, docs/multi_gpu.md): two TP = 2 pools
on the shards of a TP1 layer's weights and inputs give, bit for bit, the TP1 pool's outputs and
committed states restricted to their columns, under both strategies."""

import numpy as np
import pytest

import specstate
from specstate import Strategy
from conftest import bits


def take(x, ranges, axis):
    """The shard of array x along `axis`: its runs of columns, concatenated in order."""
    if isinstance(ranges, specstate.ColumnRange):
        ranges = [ranges]
    return np.concatenate(
        [np.take(x, np.arange(r.begin, r.begin + r.count), axis=axis) for r in ranges], axis=axis)


def gdn_config():
    layer = specstate.GdnConfig(num_k_heads=2, num_v_heads=4, head_k_dim=8, head_v_dim=16,
                                conv_width=4, conv_bias=True, act_dtype=specstate.DType.F32,
                                conv_state_dtype=specstate.DType.F32)
    return specstate.ModelConfig.gated_delta_net(2, layer)


def test_shard_map_columns():
    tp1 = gdn_config()
    c = tp1.conv_dim()
    maps = [specstate.shard_map(tp1, 2, r) for r in range(2)]
    seen = np.zeros(c, int)
    for r, m in enumerate(maps):
        assert (m.tp, m.rank) == (2, r)
        assert m.config.gdn.num_k_heads == 1 and m.config.gdn.num_v_heads == 2
        assert m.conv_dim() == m.config.conv_dim() == c // 2
        assert (m.heads.begin, m.heads.count) == (2 * r, 2)
        assert m.head_elems == 16
        for run in m.conv:
            seen[run.begin:run.begin + run.count] += 1
    assert (seen == 1).all(), "the shards' conv columns cover TP1's once"


@pytest.mark.parametrize("tp, rank, field", [(3, 0, "tp = 3"), (2, 2, "rank = 2"),
                                             (0, 0, "tp = 0"), (2, -1, "rank = -1")])
def test_shard_map_rejects(tp, rank, field):
    with pytest.raises(specstate.InvalidArgumentError, match=field):
        specstate.shard_map(gdn_config(), tp, rank)


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
def test_tp2_equals_tp1_columns(strategy):
    tp1 = gdn_config()
    L, c, hv, w = tp1.num_layers, tp1.conv_dim(), tp1.gdn.num_v_heads, tp1.conv_width()
    V = tp1.gdn.head_v_dim
    rng = np.random.default_rng(7)
    f32 = lambda *shape, s=1.0: (rng.standard_normal(shape) * s).astype(np.float32)
    weights = [dict(conv_weight=f32(c, w, s=0.5), conv_bias=f32(c, s=0.1), A_log=f32(hv, s=0.5),
                    dt_bias=f32(hv, s=0.5)) for _ in range(L)]
    prompt = [(f32(5, c), f32(5, hv), f32(5, hv)) for _ in range(L)]
    window = [(f32(4, c), f32(4, hv), f32(4, hv)) for _ in range(L)]
    maps = [specstate.shard_map(tp1, 2, r) for r in range(2)]

    def run(config, shard):
        """Prefill, one verify round of 4 tokens, commit 3; the verify outputs and states."""
        cols = (lambda x, axis: take(x, shard.conv, axis)) if shard else (lambda x, axis: x)
        heads = (lambda x, axis: take(x, shard.heads, axis)) if shard else (lambda x, axis: x)
        pool = specstate.StatePool(config, specstate.PoolOptions(
            num_slots=2, max_rows=1, max_window=4, strategy=strategy))
        n_c, n_hv = config.conv_dim(), config.gdn.num_v_heads
        ws = [specstate.GdnWeights(conv_weight=cols(x["conv_weight"], 0),
                                   A_log=heads(x["A_log"], 0), dt_bias=heads(x["dt_bias"], 0),
                                   conv_bias=cols(x["conv_bias"], 0)) for x in weights]

        def io(x, a, b):
            n = x.shape[0]
            out = specstate.GdnOutputs(core_out=np.zeros((n, n_hv, V), np.float32),
                                       conv_out=np.zeros((n, n_c), np.float32))
            return specstate.GdnInputs(cols(x, 1), heads(a, 1), heads(b, 1)), out

        h = pool.acquire()
        for layer in range(L):
            inputs, out = io(*prompt[layer])
            pool.prefill(layer, h, ws[layer], inputs, out)
        pool.begin_verify(specstate.VerifyBatch([h], window=4))
        outs = []
        for layer in range(L):
            inputs, out = io(*window[layer])
            pool.verify(layer, ws[layer], inputs, out)
            outs.append((out.conv_out.copy(), out.core_out.copy()))
        pool.commit([3])
        pool.materialize()
        st = [(np.array(specstate.to_numpy(pool.conv_state(l, h))),
               np.array(specstate.to_numpy(pool.ssm_state(l, h)))) for l in range(L)]
        return outs, st

    want_outs, want_states = run(tp1, None)
    for m in maps:
        outs, st = run(m.config, m)
        for layer in range(L):
            conv_out, core_out = outs[layer]
            assert np.array_equal(bits(conv_out), bits(take(want_outs[layer][0], m.conv, 1)))
            assert np.array_equal(bits(core_out), bits(take(want_outs[layer][1], m.heads, 1)))
            assert np.array_equal(bits(st[layer][0]), bits(take(want_states[layer][0], m.conv, 0)))
            assert np.array_equal(bits(st[layer][1]), bits(take(want_states[layer][1], m.heads, 0)))
            assert np.any(core_out != 0) and np.any(st[layer][1] != 0)
