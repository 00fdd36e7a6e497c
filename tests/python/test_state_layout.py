"""State layouts through the Python package (CPU backend): a pool over an engine's arrays in
vLLM's element order (conv_state (L, slots, W-1, conv_dim), the state (L, slots, HV, K, V)),
handed over as their transposes, holds the same states as an owning pool in specstate's order,
bit for bit, and writes the arrays in place; views in another order are rejected naming the
option."""

import gc
import os
import resource

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
            assert np.any(oc.core_out != 0), "the verify wrote no output"
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


# --- specstate.vllm: a pool over tensors shaped as vLLM's cache, every kind ----------------------

def _kind_model(kind):
    """(config, weights, inputs(n) -> per-layer inputs, outputs(n), main output name)."""
    if kind == "gdn":
        model = Model(seed=21)
        return (model.config, model.weights,
                lambda n: [specstate.GdnInputs(x, a, b) for x, a, b in model.inputs(n)],
                model.outputs, "core_out")
    if kind == "mamba2":
        from test_mamba2 import mamba_model
        config, weights, inputs, outputs = mamba_model(gate=True, seed=22)
        return config, weights, inputs, outputs, "y"
    from test_kda import kda_model
    _, config, weights, inputs, outputs = kda_model(seed=23)
    return config, weights, inputs, outputs, "core_out"


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
@pytest.mark.parametrize("kind, order", [("gdn", "VK"), ("gdn", "KV"), ("mamba2", "VK"),
                                         ("kda", "VK"), ("kda", "KV")])
def test_vllm_state_pool_adopts_vllms_shapes(kind, order, strategy):
    """`order` VK: vLLM's delta-rule states today ([HV][V][K]); KV: before its PR #33291."""
    from specstate import vllm
    order = getattr(specstate.SsmLayout, order)
    config, weights, inputs, outputs, main = _kind_model(kind)
    L, slots, T = config.num_layers, 3, 4
    conv = [np.full(vllm.conv_shape(config, slots), 7.0, np.float32) for _ in range(L)]
    rec = [np.full(vllm.recurrent_shape(config, slots, order), 7.0, np.float32)
           for _ in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=1, max_window=T, strategy=strategy)
    pool = vllm.state_pool(config, opts, conv_states=conv, recurrent_states=rec, order=order)
    assert opts.conv_layout == ConvLayout.CHANNELS_FIRST  # the caller's options are not changed
    own = specstate.StatePool(config, opts)
    hp, ho = pool.acquire(), own.acquire()
    for accepted in [3, 1, 4]:
        window = inputs(T)
        for p, h in ((pool, hp), (own, ho)):
            p.begin_verify(specstate.VerifyBatch([h], window=T))
        for layer, x in enumerate(window):
            op, oo = outputs(T), outputs(T)
            pool.verify(layer, weights[layer], x, op)
            own.verify(layer, weights[layer], x, oo)
            assert np.array_equal(bits(getattr(op, main)), bits(getattr(oo, main)))
            assert np.any(getattr(op, main) != 0), "the verify wrote no output"
        pool.commit([accepted])
        own.commit([accepted])
    slot = pool.slot_index(hp)
    kv = order == specstate.SsmLayout.KV
    for layer, (cp, sp), (co, so) in zip(range(L), states(pool, L), states(own, L)):
        assert np.array_equal(bits(cp[slot]), bits(co[slot]))
        assert np.array_equal(bits(sp[slot]), bits(so[slot]))
        # The engine's tensors hold the committed state, in vLLM's order, written in place.
        assert np.array_equal(bits(conv[layer][slot]), bits(co[slot].T))
        want = so[slot].swapaxes(-1, -2) if kv else so[slot]
        assert np.array_equal(bits(rec[layer][slot]), bits(want))
        assert np.abs(rec[layer][slot]).sum() > 0
        assert (conv[layer][slot + 1:] == 7.0).all() and (rec[layer][slot + 1:] == 7.0).all()


@pytest.mark.parametrize("end", ["del", "close", "with"])
@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
@pytest.mark.parametrize("kind", ["gdn", "mamba2", "kda"])
def test_dropping_a_vllm_pool_leaves_the_committed_state_in_the_engines_tensors(kind, strategy,
                                                                                  end):
    """The pool's end materializes its live slots (replay defers steps): without it the engine's
    tensors kept the checkpoint of an earlier round after `del pool`. The same for close() and
    the end of a with block, which free the pool without the GIL."""
    import contextlib
    import gc
    from specstate import vllm
    config, weights, inputs, outputs, _ = _kind_model(kind)
    L, slots, T = config.num_layers, 2, 4
    conv = [np.zeros(vllm.conv_shape(config, slots), np.float32) for _ in range(L)]
    rec = [np.zeros(vllm.recurrent_shape(config, slots), np.float32) for _ in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=1, max_window=T, strategy=strategy)
    pool = vllm.state_pool(config, opts, conv_states=conv, recurrent_states=rec)
    own = specstate.StatePool(config, opts)
    with pool if end == "with" else contextlib.nullcontext(pool):
        hp, ho = pool.acquire(), own.acquire()
        for _ in range(3):  # 2 accepted a round: steps stay pending under the default ring
            window = inputs(T)
            for p, h in ((pool, hp), (own, ho)):
                p.begin_verify(specstate.VerifyBatch([h], window=T))
                for layer, x in enumerate(window):
                    p.verify(layer, weights[layer], x, outputs(T))
                p.commit([2])
        slot = pool.slot_index(hp)
    if end == "del":
        del pool
        gc.collect()
    elif end == "close":
        pool.close()
    if end != "del":
        assert pool.closed
    for layer, (co, so) in zip(range(L), states(own, L)):
        assert np.array_equal(bits(conv[layer][slot]), bits(co[slot].T))
        assert np.array_equal(bits(rec[layer][slot]), bits(so[slot]))
        assert np.abs(rec[layer][slot]).sum() > 0


def test_vllm_state_pool_refuses_other_shapes_naming_the_tensor():
    from specstate import vllm
    config, *_ = _kind_model("kda")
    L, slots = config.num_layers, 2
    conv = [np.zeros(vllm.conv_shape(config, slots), np.float32) for _ in range(L)]
    rec = [np.zeros(vllm.recurrent_shape(config, slots), np.float32) for _ in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_window=4)
    s, hv, v, k = vllm.recurrent_shape(config, slots)
    _, w1, c = vllm.conv_shape(config, slots)
    bad = [
        # KDA's state in the order before vLLM's PR #33291 ([HV][K][V]) given for today's
        (dict(recurrent_states=[np.zeros((s, hv, k, v), np.float32)] * L),
         r"recurrent_states\[0\] has shape \(2, 4, 8, 6\); vLLM's layout"),
        # vLLM's speculative conv columns (W-1+num_spec): specstate owns the rollback
        (dict(conv_states=[np.zeros((s, w1 + 2, c), np.float32)] * L),
         r"conv_states\[0\] has shape \(2, 5, 56\)"),
        (dict(conv_states=conv[:1]), r"conv_states has 1 tensors, the model has 2"),
        (dict(recurrent_states=[rec[0], np.zeros((s + 1, hv, v, k), np.float32)]),
         r"recurrent_states\[1\] has 3 slots, recurrent_states\[0\] has 2"),
    ]
    for change, message in bad:
        args = dict(conv_states=conv, recurrent_states=rec)
        args.update(change)
        with pytest.raises(specstate.InvalidArgumentError, match=message) as e:
            vllm.state_pool(config, opts, **args)
        assert e.value.status == specstate.Status.INVALID_ARGUMENT
    assert all(not t.any() for t in conv + rec)  # nothing written
    # An order that is not vLLM's for the kind, named.
    m2 = _kind_model("mamba2")[0]
    with pytest.raises(specstate.InvalidArgumentError, match="vllm::recurrent_shape: order = kv is for the delta-rule"):
        vllm.recurrent_shape(m2, 1, specstate.SsmLayout.KV)
    with pytest.raises(specstate.InvalidArgumentError, match="order = 'x' is not an SsmLayout"):
        vllm.state_pool(config, opts, conv, rec, order="x")
    # The pool's own checks still apply past the shapes (a tensor with a slot of other strides).
    with pytest.raises(specstate.Error):
        vllm.state_pool(config, opts, conv_states=[t[:, :, ::-1] for t in conv],
                        recurrent_states=rec)
    # Arguments of the wrong kind are TypeErrors naming them (they were AttributeErrors, or named
    # the private _vllm_layout_options); a slot count other than the options' and the pool's own
    # refusals name the caller's tensors, not the transposes handed to the pool.
    wrong = [
        (lambda: vllm.state_pool(None, opts, conv, rec), TypeError,
         r"config: expected a ModelConfig, got NoneType"),
        (lambda: vllm.state_pool(config, None, conv, rec), TypeError,
         r"options: expected a PoolOptions, got NoneType"),
        (lambda: vllm.state_pool(config, opts, (t for t in conv), rec), TypeError,
         r"conv_states: expected a sequence of tensors \(a list, or a stacked array\), got "
         r"generator"),
        (lambda: vllm.state_pool(config, opts, [[0.0]] * L, rec), TypeError,
         r"conv_states\[0\]: expected an array with shape and swapaxes"),
        (lambda: vllm.state_pool(config, specstate.PoolOptions(num_slots=1, max_window=4), conv,
                                 rec), specstate.InvalidArgumentError,
         r"conv_states\[0\] has shape \(2, 3, 56\): 2 slots, options.num_slots = 1"),
        (lambda: vllm.state_pool(config, opts, [t.astype(np.float64) for t in conv], rec),
         TypeError, r"^conv_states\[0\]: dtype float64 is not supported .* transposed view"),
        (lambda: vllm.conv_shape(config, -1), specstate.InvalidArgumentError,
         r"vllm::conv_shape: slots = -1 must be >= 0"),
        (lambda: vllm.recurrent_shape(config, -1), specstate.InvalidArgumentError,
         r"vllm::recurrent_shape: slots = -1 must be >= 0"),
    ]
    for call, error, message in wrong:
        with pytest.raises(error, match=message):
            call()
    # One stacked [layers, slots, ...] array per kind of state (vLLM v0's cache) is a sequence too.
    stacked_conv, stacked_rec = np.stack(conv), np.stack(rec)
    pool = vllm.state_pool(config, opts, stacked_conv, stacked_rec)
    assert np.shares_memory(np.asarray(pool.ssm_state(0)), stacked_rec)
    assert np.shares_memory(np.asarray(pool.conv_state(0)), stacked_conv)
    unvalidated = specstate.ModelConfig.kda(1, specstate.KdaConfig(num_k_heads=0))
    with pytest.raises(specstate.InvalidArgumentError, match="ModelConfig"):
        vllm.conv_shape(unvalidated, 1)
    assert all(not t.any() for t in conv + rec)


def test_vllm_helpers_are_the_cpp_ones():
    """specstate.vllm calls specstate::vllm (it re-implemented it: its layout_options took no
    options and returned a dict, where C++ returns the caller's PoolOptions with vLLM's order)."""
    from specstate import vllm
    config = _kind_model("kda")[0]
    opts = specstate.PoolOptions(num_slots=3, max_window=4, strategy=specstate.Strategy.REPLAY)
    got = vllm.layout_options(opts, config, specstate.SsmLayout.KV)
    assert isinstance(got, specstate.PoolOptions)
    assert got.conv_layout == specstate.ConvLayout.CHANNELS_LAST
    assert got.ssm_layout == specstate.SsmLayout.KV
    assert (got.num_slots, got.max_window, got.strategy) == (3, 4, specstate.Strategy.REPLAY)
    assert opts.conv_layout == specstate.ConvLayout.CHANNELS_FIRST  # a copy
    m2 = _kind_model("mamba2")[0]
    assert vllm.layout_options(opts, m2).ssm_layout == specstate.SsmLayout.VK
    with pytest.raises(specstate.InvalidArgumentError, match="vllm::layout_options: order = kv"):
        vllm.layout_options(opts, m2, specstate.SsmLayout.KV)
    assert vllm.conv_shape(config, 5) == (5, config.conv_width() - 1, config.conv_dim())


def test_a_second_live_pool_over_the_same_arrays_is_refused():
    # Both pools handed out the same bytes as slot 0: the second's acquire() zeroed the first's
    # live request, silently. Refused, naming the views and the live pool; the first untouched.
    model = Model(seed=5)
    cfg, L, slots = model.cfg, model.layers, 3
    c, w = cfg.conv_dim(), cfg.conv_width
    conv = [np.zeros((slots, c, w - 1), np.float32) for _ in range(L)]
    ssm = [np.zeros((slots, cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim), np.float32)
           for _ in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=2, max_window=4)
    first = specstate.StatePool(model.config, opts, committed_conv=conv, committed_ssm=ssm)
    h = first.acquire()
    for layer, (x, a, b) in enumerate(model.inputs(3)):
        first.prefill(layer, h, model.weights[layer], specstate.GdnInputs(x, a, b),
                      model.outputs(3))
    before = first.export_slot(h)
    assert np.abs(ssm[0]).sum() > 0
    message = r"committed\.conv\[0\] shares bytes with the committed conv\[0\] of pool \d+, " \
              r"which is alive"
    with pytest.raises(specstate.InvalidArgumentError, match=message):
        specstate.StatePool(model.config, opts, committed_conv=conv, committed_ssm=ssm)
    own = model.pool(Strategy.SNAPSHOT, slots=slots)
    with pytest.raises(specstate.InvalidArgumentError, match=message):
        specstate.StatePool(model.config, opts,
                            committed_conv=[np.from_dlpack(own.conv_state(l)) for l in range(L)],
                            committed_ssm=[np.from_dlpack(own.ssm_state(l)) for l in range(L)])
    assert first.is_live(h) and np.array_equal(first.export_slot(h), before)
    slot = first.slot_index(h)
    del first
    gc.collect()
    again = specstate.StatePool(model.config, opts, committed_conv=conv, committed_ssm=ssm)
    assert np.array_equal(again.export_slot(again.adopt(slot)), before)


def test_a_pool_over_another_pools_workspace_is_refused_before_it_allocates():
    # A pool over another live pool's snapshot workspace was built (the registry held committed
    # state only), and a refused pool had allocated and zeroed its own workspace first.
    model = Model(seed=1)
    cfg, L = model.cfg, model.layers
    c, w = cfg.conv_dim(), cfg.conv_width
    hv, v, k = cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim
    a = model.pool(Strategy.SNAPSHOT, slots=2, rows=4, window=4)
    sc = [np.from_dlpack(a.snapshot_conv(layer)) for layer in range(L)]
    ss = [np.from_dlpack(a.snapshot_ssm(layer)) for layer in range(L)]
    conv = [x.reshape(-1)[: 2 * c * (w - 1)].reshape(2, c, w - 1) for x in sc]
    ssm = [x.reshape(-1)[: 2 * hv * v * k].reshape(2, hv, v, k) for x in ss]
    assert np.shares_memory(conv[0], sc[0])
    small = specstate.PoolOptions(num_slots=2, max_rows=2, max_window=4)
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"committed\.conv\[0\] shares bytes with the workspace snapshot "
                             r"conv scratch of pool \d+, which is alive"):
        specstate.StatePool(model.config, small, committed_conv=conv, committed_ssm=ssm)
    # Refused before its own workspace (here about 400 MiB of snapshots) is allocated.
    arrs_c = [np.zeros((2, c, w - 1), np.float32) for _ in range(L)]
    arrs_s = [np.zeros((2, hv, v, k), np.float32) for _ in range(L)]
    first = specstate.StatePool(model.config, small, committed_conv=arrs_c, committed_ssm=arrs_s)
    big = specstate.PoolOptions(num_slots=2, max_rows=4096, max_window=16)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # The peak grows only past the earlier peak: an earlier test that peaked 400 MiB above the
    # memory in use now would hide the workspace's allocation (then the check cannot run).
    with open("/proc/self/statm") as f:
        now_kib = int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    if before > now_kib + 300 * 1024:
        pytest.skip(f"the process peaked at {before} KiB, {now_kib} KiB in use: a 400 MiB "
                    "allocation would not raise the peak")
    with pytest.raises(specstate.InvalidArgumentError, match=r"which is alive"):
        specstate.StatePool(model.config, big, committed_conv=arrs_c, committed_ssm=arrs_s)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 100, grown_mib
    assert first.free_slots() == 2
