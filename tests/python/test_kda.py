"""KDA (Kimi Delta Attention) layers through the Python package (CPU): verify/commit rounds equal
plain decode, bit for bit, for both strategies and both gates; prefill matches a float64 numpy
reference of DESIGN.md section 3's KDA step; other kinds' arguments and a CUDA pool are refused."""

import numpy as np
import pytest

import specstate
from specstate import DType, Strategy
from conftest import bits, states


def kda_model(layers=2, lower_bound=None, seed=0):
    cfg = specstate.KdaConfig(num_k_heads=2, num_v_heads=4, head_k_dim=8, head_v_dim=6,
                              conv_bias=True, lower_bound=lower_bound, act_dtype=DType.F32,
                              conv_state_dtype=DType.F32)
    rng = np.random.default_rng(seed)
    r = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    c, hv, k = cfg.conv_dim(), cfg.num_v_heads, cfg.head_k_dim
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), (hv, k)))
    weights = [specstate.KdaWeights(conv_weight=r(c, cfg.conv_width, scale=0.5),
                                    A_log=np.log(rng.uniform(1, 16, hv)).astype(np.float32),
                                    dt_bias=np.log(np.expm1(dt)).astype(np.float32),
                                    conv_bias=r(c, scale=0.1))
               for _ in range(layers)]

    def inputs(n):
        return [specstate.KdaInputs(r(n, c), r(n, hv, k), r(n, hv)) for _ in range(layers)]

    def outputs(n):
        return specstate.KdaOutputs(core_out=np.zeros((n, hv, cfg.head_v_dim), np.float32),
                                    conv_out=np.zeros((n, c), np.float32))

    return cfg, specstate.ModelConfig.kda(layers, cfg), weights, inputs, outputs


def reference(cfg, w, x):
    """float64 KDA over the tokens of `x` from a zero state: core_out [n, HV, V] (S [HV][V][K])."""
    H, HV, K, V, W = (cfg.num_k_heads, cfg.num_v_heads, cfg.head_k_dim, cfg.head_v_dim,
                      cfg.conv_width)
    D = cfg.conv_dim()
    win = np.zeros((D, W - 1))
    S = np.zeros((HV, V, K))
    cw, cb = w.conv_weight.astype(np.float64), w.conv_bias.astype(np.float64)
    A = np.exp(w.A_log.astype(np.float64))
    out = []
    for t in range(x.mixed_qkv.shape[0]):
        xt = x.mixed_qkv[t].astype(np.float64)
        full = np.concatenate([win, xt[:, None]], axis=1)
        y = (full * cw).sum(1) + cb
        y = y / (1 + np.exp(-y))
        win = full[:, 1:]
        o = np.zeros((HV, V))
        for hv in range(HV):
            h = hv // (HV // H)
            q, k, v = y[h * K:(h + 1) * K], y[H * K + h * K:H * K + (h + 1) * K], \
                y[2 * H * K + hv * V:2 * H * K + (hv + 1) * V]
            q = q / np.sqrt((q * q).sum() + 1e-6) / np.sqrt(K)
            k = k / np.sqrt((k * k).sum() + 1e-6)
            xg = x.g[t, hv].astype(np.float64) + w.dt_bias[hv]
            if cfg.lower_bound is None:
                g = -A[hv] * np.where(xg > 20, xg, np.log1p(np.exp(np.minimum(xg, 20))))
            else:
                g = cfg.lower_bound / (1 + np.exp(-A[hv] * xg))
            beta = 1 / (1 + np.exp(-float(x.b[t, hv])))
            S[hv] *= np.exp(g)[None, :]
            u = beta * (v - S[hv] @ k)
            S[hv] += np.outer(u, k)
            o[hv] = S[hv] @ q
        out.append(o)
    return np.array(out)


@pytest.mark.parametrize("lower_bound", [None, -5.0], ids=["plain_gate", "lower_bound"])
def test_kda_prefill_matches_float64_reference(lower_bound):
    cfg, config, weights, inputs, outputs = kda_model(layers=1, lower_bound=lower_bound)
    pool = specstate.StatePool(config, specstate.PoolOptions(num_slots=1, max_window=4))
    h = pool.acquire()
    x = inputs(6)[0]
    o = outputs(6)
    pool.prefill(0, h, weights[0], x, o)
    ref = reference(cfg, weights[0], x)
    assert np.abs(o.core_out).max() > 0
    np.testing.assert_allclose(o.core_out, ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
@pytest.mark.parametrize("lower_bound", [None, -5.0], ids=["plain_gate", "lower_bound"])
def test_kda_verify_commit_equals_decode(strategy, lower_bound):
    _, config, weights, inputs, outputs = kda_model(lower_bound=lower_bound)
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
                ref.decode(layer, [hr], weights[layer],
                           specstate.KdaInputs(x.mixed_qkv[t:t + 1], x.g[t:t + 1], x.b[t:t + 1]),
                           o)
                assert np.array_equal(bits(o.core_out[0]), bits(outs[layer].core_out[t]))
            assert np.any(outs[layer].core_out != 0), "the verify wrote no output"
    nonzero = False
    for (c0, s0), (c1, s1) in zip(states(spec, 2), states(ref, 2)):
        assert np.array_equal(bits(c0), bits(c1)) and np.array_equal(bits(s0), bits(s1))
        nonzero = nonzero or bool(np.any(s0 != 0))
    assert nonzero


def test_kda_pool_rejects_other_kinds_and_unsupported_cuda_shapes():
    cfg, config, weights, inputs, outputs = kda_model()
    pool = specstate.StatePool(config, specstate.PoolOptions(num_slots=1, max_window=4))
    h = pool.acquire()
    c, hv = cfg.conv_dim(), cfg.num_v_heads
    gdn_w = specstate.GdnWeights(conv_weight=np.zeros((c, 4), np.float32),
                                 A_log=np.zeros(hv, np.float32), dt_bias=np.zeros(hv, np.float32))
    gdn_in = specstate.GdnInputs(np.zeros((1, c), np.float32), np.zeros((1, hv), np.float32),
                                 np.zeros((1, hv), np.float32))
    gdn_out = specstate.GdnOutputs(core_out=np.zeros((1, hv, cfg.head_v_dim), np.float32))
    with pytest.raises(specstate.Error, match="kind = kda"):
        pool.prefill(0, h, gdn_w, gdn_in, gdn_out)
    bad = inputs(1)[0]
    bad.g = np.zeros((1, hv), np.float32)  # GDN's gate shape: KDA's is [tokens, HV, K]
    with pytest.raises(specstate.Error, match="inputs.g"):
        pool.prefill(0, h, weights[0], bad, outputs(1))
    assert config.kind == specstate.LayerKind.KDA and config.kda_layer.head_k_dim == 8
    # On CUDA a KDA pool is treated as a GDN one: with no usable device (or no CUDA backend in
    # this build) it gets GDN's error word for word; with one, head_k_dim = 8 is refused by name.
    cuda = specstate.PoolOptions(backend=specstate.Backend.CUDA)
    gdn_error = None
    try:
        specstate.StatePool(specstate.ModelConfig.gated_delta_net(1, specstate.GdnConfig()), cuda)
    except specstate.Error as e:
        gdn_error = str(e)
    with pytest.raises(specstate.Error) as refused:
        specstate.StatePool(config, cuda)
    if gdn_error is not None:
        assert str(refused.value) == gdn_error
    else:
        assert "head_k_dim = 8" in str(refused.value)


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
def test_kda_over_vllms_cache_arrays_and_slot_hand_off(strategy, tmp_path):
    """A KDA pool over arrays shaped as vLLM's KDA cache before its PR #33291 (conv_state (L,
    slots, W-1, conv_dim), recurrent_state (L, slots, HV, K, V): fla's order; vLLM's today is
    (HV, V, K)), adopted as their transposes, runs the same rounds as an
    owning pool in specstate's order, bit for bit, and writes the arrays in place; its slot moves
    to a pool of specstate's order through a safetensors file (logical order), and a raw buffer
    into that pool is refused naming both orders, with nothing written."""
    from specstate import ConvLayout, SsmLayout
    cfg, config, weights, inputs, outputs = kda_model(seed=4)
    L, slots, T = 2, 3, 4
    c, w = cfg.conv_dim(), cfg.conv_width
    hv, k, v = cfg.num_v_heads, cfg.head_k_dim, cfg.head_v_dim
    conv_all = np.full((L, slots, w - 1, c), 7.0, np.float32)
    rec_all = np.full((L, slots, hv, k, v), 7.0, np.float32)
    opts = specstate.PoolOptions(num_slots=slots, max_rows=1, max_window=T, strategy=strategy,
                                 conv_layout=ConvLayout.CHANNELS_LAST, ssm_layout=SsmLayout.KV)
    vllm = specstate.StatePool(config, opts,
                               committed_conv=[conv_all[l].transpose(0, 2, 1) for l in range(L)],
                               committed_ssm=[rec_all[l].transpose(0, 1, 3, 2) for l in range(L)])
    own = specstate.StatePool(config, specstate.PoolOptions(num_slots=slots, max_rows=1,
                                                            max_window=T, strategy=strategy))
    hv_, ho = vllm.acquire(), own.acquire()
    for accepted in [2, 4, 0, 3]:
        window = inputs(T)
        for pool, h in ((vllm, hv_), (own, ho)):
            pool.begin_verify(specstate.VerifyBatch([h], window=T))
        for layer, x in enumerate(window):
            ov, oo = outputs(T), outputs(T)
            vllm.verify(layer, weights[layer], x, ov)
            own.verify(layer, weights[layer], x, oo)
            assert np.array_equal(bits(ov.core_out), bits(oo.core_out))
            assert np.any(ov.core_out != 0), "the verify wrote no output"
        vllm.commit([accepted])
        own.commit([accepted])
    slot = vllm.slot_index(hv_)
    for (cv, sv), (co, so) in zip(states(vllm, L), states(own, L)):
        assert np.array_equal(bits(cv[slot]), bits(co[slot]))
        assert np.array_equal(bits(sv[slot]), bits(so[slot]))
    own_conv, own_ssm = states(own, L)[1]
    assert np.array_equal(bits(conv_all[1, slot]), bits(own_conv[slot].T))
    assert np.array_equal(bits(rec_all[1, slot]), bits(own_ssm[slot].transpose(0, 2, 1)))
    assert np.abs(rec_all[:, slot]).sum() > 0
    assert (conv_all[:, slot + 1:] == 7.0).all() and (rec_all[:, slot + 1:] == 7.0).all()

    # Hand-off to specstate's order: a safetensors file holds the logical order.
    dst = specstate.StatePool(config, specstate.PoolOptions(num_slots=2, max_window=T))
    g = dst.acquire()
    path = tmp_path / "kda_slot.safetensors"
    vllm.export_slot(hv_, path)
    dst.import_slot(g, path)
    for (cd, sd), (co, so) in zip(states(dst, L), states(own, L)):
        assert np.array_equal(bits(cd[dst.slot_index(g)]), bits(co[slot]))
        assert np.array_equal(bits(sd[dst.slot_index(g)]), bits(so[slot]))
    # A raw buffer carries the order it was written in: refused by a pool of another order.
    before = states(dst, L)
    with pytest.raises(specstate.Error, match="channels_last"):
        dst.import_slot(g, vllm.export_slot(hv_))
    for (c0, s0), (c1, s1) in zip(before, states(dst, L)):
        assert np.array_equal(bits(c0), bits(c1)) and np.array_equal(bits(s0), bits(s1))
