"""State layouts through the Python package (CPU backend): a pool over an engine's arrays in
vLLM's element order (conv_state (L, slots, W-1, conv_dim), the state (L, slots, HV, K, V)),
handed over as their transposes, holds the same states as an owning pool in specstate's order,
bit for bit, and writes the arrays in place; views in another order are rejected naming the
option."""

import numpy as np
import pytest

import specstate
from specstate import ConvLayout, SsmLayout, Strategy
from conftest import Model, bits, states


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
def test_vllm_ordered_arrays_hold_the_same_state(strategy):
    model = Model(seed=11)
    cfg, L, slots = model.cfg, model.layers, 3
    c, w = cfg.conv_dim(), cfg.conv_width
    hv, v, k = cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim
    conv_all = np.full((L, slots, w - 1, c), 7.0, np.float32)  # vLLM's "SD" conv_state
    ssm_all = np.full((L, slots, hv, k, v), 7.0, np.float32)  # [HV][K][V] per slot
    conv_views = [conv_all[l].transpose(0, 2, 1) for l in range(L)]  # [slots, C, W-1]
    ssm_views = [ssm_all[l].transpose(0, 1, 3, 2) for l in range(L)]  # [slots, HV, V, K]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=2, max_window=4, strategy=strategy,
                                 conv_layout=ConvLayout.CHANNELS_LAST, ssm_layout=SsmLayout.KV)
    assert opts.conv_layout == ConvLayout.CHANNELS_LAST and opts.ssm_layout == SsmLayout.KV
    assert specstate.conv_layout_name(ConvLayout.CHANNELS_LAST) == "channels_last"
    assert specstate.ssm_layout_name(SsmLayout.KV) == "kv"
    caller = specstate.StatePool(model.config, opts, committed_conv=conv_views,
                                 committed_ssm=ssm_views)
    own = model.pool(strategy, slots=slots)
    hc, ho = caller.acquire(), own.acquire()
    for layer, (x, a, b) in enumerate(model.inputs(3)):
        for pool, h in ((caller, hc), (own, ho)):
            pool.prefill(layer, h, model.weights[layer], specstate.GdnInputs(x, a, b),
                         model.outputs(3))
    for rnd in range(3):
        for pool, h in ((caller, hc), (own, ho)):
            pool.begin_verify(specstate.VerifyBatch([h], window=4))
        for layer, (x, a, b) in enumerate(model.inputs(4)):
            oc, oo = model.outputs(4), model.outputs(4)
            caller.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), oc)
            own.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), oo)
            assert np.array_equal(bits(oc.core_out), bits(oo.core_out))
        caller.commit([1 + rnd])
        own.commit([1 + rnd])
    slot = caller.slot_index(hc)
    for (cc, sc), (co, so) in zip(states(caller, L), states(own, L)):
        assert np.array_equal(bits(cc[slot]), bits(co[slot]))
        assert np.array_equal(bits(sc[slot]), bits(so[slot]))
    # The engine's arrays hold the state in its own order, written in place.
    own_conv, own_ssm = states(own, L)[1]
    assert np.array_equal(bits(conv_all[1, slot]), bits(own_conv[slot].T))
    assert np.array_equal(bits(ssm_all[1, slot]), bits(own_ssm[slot].transpose(0, 2, 1)))
    assert np.abs(ssm_all[1, slot]).sum() > 0
    assert (conv_all[:, slot + 1:] == 7.0).all() and (ssm_all[:, slot + 1:] == 7.0).all()
    # The pool's views carry the order in their strides.
    view = specstate.to_numpy(caller.ssm_state(0))
    assert view.shape == (slots, hv, v, k) and view.strides[3] == v * 4


def test_views_in_another_order_are_rejected():
    model = Model(seed=12)
    cfg, L = model.cfg, model.layers
    c, w = cfg.conv_dim(), cfg.conv_width
    hv, v, k = cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim
    conv = [np.zeros((2, c, w - 1), np.float32) for _ in range(L)]  # specstate's order
    ssm = [np.zeros((2, hv, v, k), np.float32) for _ in range(L)]
    opts = specstate.PoolOptions(num_slots=2, conv_layout=ConvLayout.CHANNELS_LAST)
    with pytest.raises(specstate.Error,
                       match=r"committed\.conv\[0\].*options\.conv_layout = channels_last"):
        specstate.StatePool(model.config, opts, committed_conv=conv, committed_ssm=ssm)
