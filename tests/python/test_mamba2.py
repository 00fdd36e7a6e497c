"""Mamba2 layers through the Python package (CPU): verify/commit rounds equal plain decode, bit
for bit, for both strategies; the GDN/Mamba2 overloads are chosen by the argument types."""

import numpy as np
import pytest

import specstate
from specstate import DType, Strategy
from conftest import bits, states


def mamba_model(layers=2, gate=False, seed=0):
    cfg = specstate.Mamba2Config(num_heads=4, head_dim=8, d_state=8, n_groups=2, gate=gate,
                                 act_dtype=DType.F32, conv_state_dtype=DType.F32)
    rng = np.random.default_rng(seed)
    r = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    c, h = cfg.conv_dim(), cfg.num_heads
    weights = [specstate.Mamba2Weights(conv_weight=r(c, cfg.conv_width, scale=0.5),
                                       A_log=r(h, scale=0.5), dt_bias=r(h, scale=0.5),
                                       conv_bias=r(c, scale=0.1), D=r(h))
               for _ in range(layers)]

    def inputs(n):
        return [specstate.Mamba2Inputs(r(n, c), r(n, h), r(n, h * cfg.head_dim) if gate else None)
                for _ in range(layers)]

    def outputs(n):
        return specstate.Mamba2Outputs(y=np.zeros((n, h, cfg.head_dim), np.float32))

    return specstate.ModelConfig.mamba2(layers, cfg), weights, inputs, outputs


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
@pytest.mark.parametrize("gate", [False, True])
def test_mamba2_verify_commit_equals_decode(strategy, gate):
    config, weights, inputs, outputs = mamba_model(gate=gate)
    opts = specstate.PoolOptions(num_slots=2, max_rows=2, max_window=4, strategy=strategy)
    spec, ref = specstate.StatePool(config, opts), specstate.StatePool(config, opts)
    hs, hr = spec.acquire(), ref.acquire()
    T = 4
    for accepted in [3, 0, 4, 1, 2]:
        window = inputs(T)
        spec.begin_verify(specstate.VerifyBatch([hs], window=T))
        outs = []
        for layer, x in enumerate(window):
            o = outputs(T)
            spec.verify(layer, weights[layer], x, o)
            outs.append(o)
        spec.commit([accepted])
        for layer, x in enumerate(window):
            for t in range(accepted):
                o = outputs(1)
                z = None if x.z is None else x.z[t:t + 1]
                ref.decode(layer, [hr], weights[layer],
                           specstate.Mamba2Inputs(x.xBC[t:t + 1], x.dt[t:t + 1], z), o)
                assert np.array_equal(bits(o.y[0]), bits(outs[layer].y[t]))
            assert np.any(outs[layer].y != 0), "the verify wrote no output"
    final = list(zip(states(spec, 2), states(ref, 2)))
    for (c0, s0), (c1, s1) in final:
        assert np.array_equal(bits(c0), bits(c1)) and np.array_equal(bits(s0), bits(s1))
    assert all(np.any(s0 != 0) for (_, s0), _ in final), "an SSM state is all zeros"


def test_mamba2_pool_rejects_gdn_arguments():
    config, weights, inputs, outputs = mamba_model()
    pool = specstate.StatePool(config, specstate.PoolOptions(num_slots=1, max_window=4))
    h = pool.acquire()
    gdn_w = specstate.GdnWeights(conv_weight=np.zeros((4, 4), np.float32),
                                 A_log=np.zeros(2, np.float32), dt_bias=np.zeros(2, np.float32))
    gdn_in = specstate.GdnInputs(np.zeros((1, 4), np.float32), np.zeros((1, 2), np.float32),
                                 np.zeros((1, 2), np.float32))
    gdn_out = specstate.GdnOutputs(core_out=np.zeros((1, 2, 2), np.float32))
    with pytest.raises(specstate.InvalidArgumentError, match="but the pool's layers are kind = mamba2"):
        pool.prefill(0, h, gdn_w, gdn_in, gdn_out)
    with pytest.raises(TypeError):  # mixed kinds match no overload
        pool.prefill(0, h, weights[0], gdn_in, gdn_out)
    assert config.kind == specstate.LayerKind.MAMBA2 and config.mamba.num_heads == 4
