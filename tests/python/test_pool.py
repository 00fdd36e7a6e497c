"""StatePool through the Python package on the CPU backend: speculative rounds equal plain decode,
both strategies are bit-identical, bad input names the argument, DLPack round trips, strides."""

import gc

import numpy as np
import pytest

import specstate
from specstate import DType, Strategy
from conftest import Model, bits, states

STRATEGIES = [Strategy.SNAPSHOT, Strategy.REPLAY]
ACTS = [DType.F32, DType.BF16]


def prefill(pool, model, handle, n):
    for layer, (x, a, b) in enumerate(model.inputs(n)):
        pool.prefill(layer, handle, model.weights[layer], specstate.GdnInputs(x, a, b),
                     model.outputs(n))


def run_rounds(model, strategy, rounds, T=4, seed=1):
    """Speculative rounds on one pool and plain decode of the accepted tokens on another.
    Returns both pools' states and checks every accepted verify output against decode."""
    spec, ref = model.pool(strategy), model.pool(strategy)
    hs, hr = spec.acquire(), ref.acquire()
    rng = np.random.default_rng(seed)
    prompt = model.inputs(5)
    for layer, (x, a, b) in enumerate(prompt):
        for pool, h in ((spec, hs), (ref, hr)):
            pool.prefill(layer, h, model.weights[layer], specstate.GdnInputs(x, a, b),
                         model.outputs(5))
    for r in range(rounds):
        window = model.inputs(T)
        accepted = int(rng.integers(0, T + 1))  # 0 = keep
        spec.begin_verify(specstate.VerifyBatch([hs], window=T))
        outs = []
        for layer, (x, a, b) in enumerate(window):
            out = model.outputs(T)
            spec.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), out)
            outs.append(out)
        spec.commit([accepted])
        for layer, (x, a, b) in enumerate(window):
            for t in range(accepted):
                out = model.outputs(1)
                ref.decode(layer, [hr], model.weights[layer],
                           specstate.GdnInputs(x[t:t + 1], a[t:t + 1], b[t:t + 1]), out)
                assert np.array_equal(bits(out.core_out[0]), bits(outs[layer].core_out[t])), \
                    f"round {r} layer {layer} token {t}: verify core_out != decode"
                assert np.array_equal(bits(out.conv_out[0]), bits(outs[layer].conv_out[t]))
            assert np.any(outs[layer].core_out != 0), f"round {r} layer {layer}: no output"
    return states(spec, model.layers), states(ref, model.layers)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("act", ACTS, ids=lambda d: d.name)
def test_verify_commit_equals_decode(strategy, act):
    got, want = run_rounds(Model(act=act), strategy, rounds=6)
    for layer, ((gc_, gs), (wc, ws)) in enumerate(zip(got, want)):
        assert np.array_equal(bits(gc_), bits(wc)), f"layer {layer} conv state"
        assert np.array_equal(bits(gs), bits(ws)), f"layer {layer} ssm state"
        assert np.any(gs != 0), f"layer {layer}: the SSM state is all zeros"


def tree_and_chain_rounds(strategy, act):
    """Chains, a tree, padding and a = 0 through one pool; returns outputs and final states."""
    model = Model(act=act, seed=3)
    pool = model.pool(strategy)
    h0, h1 = pool.acquire(), pool.acquire()
    prefill(pool, model, h0, 3)
    prefill(pool, model, h1, 2)
    rounds = [
        (specstate.VerifyBatch([h0, h1], window=4), [3, 1]),
        (specstate.VerifyBatch([h1, specstate.SlotHandle.padding(), h0], window=3), [2, 0, 0]),
        (specstate.VerifyBatch([h0, h1], window=4, parents=[-1, 0, 0, 1]), [3, 2]),
        (specstate.VerifyBatch([h0], window=2), [2]),
    ]
    outputs = []
    for batch, accepted in rounds:
        n = len(batch.rows) * batch.window
        pool.begin_verify(batch)
        for layer, (x, a, b) in enumerate(model.inputs(n)):
            out = model.outputs(n)
            pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), out)
            outputs.append(np.array(out.core_out))
        pool.commit(accepted)
    return outputs, states(pool, model.layers)


@pytest.mark.parametrize("act", ACTS, ids=lambda d: d.name)
def test_strategies_bit_identical(act):
    out_s, st_s = tree_and_chain_rounds(Strategy.SNAPSHOT, act)
    out_r, st_r = tree_and_chain_rounds(Strategy.REPLAY, act)
    for i, (x, y) in enumerate(zip(out_s, out_r)):
        assert np.array_equal(bits(x), bits(y)), f"verify output {i}"
        assert np.any(np.asarray(x, np.float32) != 0), f"verify output {i} is all zero"
    for (cs, ss), (cr, sr) in zip(st_s, st_r):
        assert np.array_equal(bits(cs), bits(cr)) and np.array_equal(bits(ss), bits(sr))
    assert any(np.any(np.asarray(ss, np.float32) != 0) for _, ss in st_s), "states all zero"


def test_replay_fold_rows_changes_no_bits_and_bad_values_are_rejected():
    """PoolOptions.replay_fold_rows (rounds of at least that many rows fold at the whole ring,
    smaller ones early): 1, 2 and the default give the snapshot pool's bits; -1 is rejected
    naming the option."""
    def rounds(strategy, fold_rows):
        model = Model(seed=5)
        pool = specstate.StatePool(model.config, specstate.PoolOptions(
            num_slots=4, max_rows=4, max_window=4, strategy=strategy, replay_ring=12,
            replay_fold_rows=fold_rows))
        h0, h1 = pool.acquire(), pool.acquire()
        rng = np.random.default_rng(9)
        for r in range(12):
            rows = [h0, h1] if r % 3 else [h0]
            pool.begin_verify(specstate.VerifyBatch(rows, window=4))
            n = 4 * len(rows)
            for layer, (x, a, b) in enumerate(model.inputs(n)):
                pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b),
                            model.outputs(n))
            pool.commit([int(v) for v in rng.integers(1, 5, len(rows))])
        return states(pool, model.layers)

    ref = rounds(Strategy.SNAPSHOT, 0)
    assert any(np.abs(ss.astype(np.float64)).sum() > 0 for _, ss in ref)
    for fold_rows in (0, 1, 2):
        got = rounds(Strategy.REPLAY, fold_rows)
        for (cs, ss), (cr, sr) in zip(ref, got):
            assert np.array_equal(bits(cs), bits(cr)) and np.array_equal(bits(ss), bits(sr)), \
                f"replay_fold_rows = {fold_rows}"
    opts = specstate.PoolOptions(strategy=Strategy.REPLAY, max_window=4, replay_fold_rows=-1)
    assert opts.replay_fold_rows == -1
    with pytest.raises(specstate.InvalidArgumentError, match="options.replay_fold_rows = -1"):
        specstate.StatePool(Model().config, opts)


def test_replay_ring_helpers():
    """The ring helpers of the package agree with the rules of docs/strategies.md."""
    K = specstate.LayerKind
    assert specstate.default_replay_ring(K.GATED_DELTA_NET, 2) == 8
    assert specstate.default_replay_ring(K.GATED_DELTA_NET, 4) == 12
    assert specstate.default_replay_ring(K.GATED_DELTA_NET, 8) == 16
    assert specstate.default_replay_ring(K.MAMBA2, 4) == 12
    assert specstate.default_replay_ring(K.MAMBA2, 8) == 16
    assert specstate.default_replay_ring(K.KDA, 2) == 8
    assert specstate.default_replay_ring(K.KDA, 4) == 8
    assert specstate.default_replay_fold_rows(K.MAMBA2) == 1
    assert specstate.default_replay_fold_rows(K.GATED_DELTA_NET) == 8
    assert specstate.default_replay_fold_rows(K.KDA) == 8
    assert specstate.replay_fold_limit(4, 12, 7) == 0
    assert specstate.replay_fold_limit(4, 12, 8) == 4
    assert specstate.replay_fold_limit(4, 12, 2, fold_rows=1) == 4
    small, large = specstate.replay_ring_model(4, 12, rows=7), specstate.replay_ring_model(4, 12)
    assert small.fold_rate == 1.0 and small.mean_history == 2.5
    assert 0.4 < large.fold_rate < 0.42 and large.mean_history > 4
    assert specstate.replay_ring_model(4, 12, rows=2, fold_rows=1).fold_rate == large.fold_rate
    with pytest.raises(specstate.InvalidArgumentError, match="ring = 7"):
        specstate.replay_fold_limit(4, 7, 16)
    with pytest.raises(specstate.InvalidArgumentError, match="rows = 0"):
        specstate.replay_ring_model(4, 12, rows=0)


def test_commit_array_and_tuple():
    model = Model()
    results = []
    # Host arrays of any integer dtype too: NumPy's default int64 was refused ("dtype int64 is not
    # supported"); a view with strides, NumPy integer scalars in a list.
    for accepted in ([2], (2,), np.array([2], np.int32), np.array([2]), np.array([2], np.uint8),
                     np.array([2, 9], np.int16)[:1], [np.int64(2)]):
        pool = model.pool()
        model.rng = np.random.default_rng(7)
        h = pool.acquire()
        pool.begin_verify(specstate.VerifyBatch([h], window=4))
        for layer, (x, a, b) in enumerate(model.inputs(4)):
            pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b),
                        model.outputs(4))
        pool.commit(accepted)
        assert pool.last_commit_status() == specstate.Status.SUCCESS
        results.append(states(pool, model.layers))
    for other in results[1:]:
        for (c0, s0), (c1, s1) in zip(results[0], other):
            assert np.array_equal(c0, c1) and np.array_equal(s0, s1)
    # A commit that ignored its values (kept nothing) would leave the fresh slot all zero.
    assert any(np.any(s != 0) for _, s in results[0]), "commit of [2] left the state all zero"


def test_commit_refuses_byte_strings():
    """commit(b"\\x02\\x03") committed accepted = [2, 3] (the bytes taken as a uint8 array), and
    b"12" meant [49, 50]; an integer array's memoryview is still an array."""
    model = Model()
    pool = model.pool()
    verified_round(model, pool)
    for value in (b"\x02", bytearray(b"\x02"), memoryview(b"\x02")):
        with pytest.raises(TypeError, match=r"accepted: expected a list of ints or an integer "
                                            r"array, got (bytes|bytearray|memoryview)"):
            pool.commit(value)
        assert pool.round_open()
    # A float array: the message names what commit takes (it named the layer arrays' dtypes).
    for value in (np.array([2.0]), np.array([True])):
        with pytest.raises(TypeError, match=r"accepted: dtype \w+ is not supported \(accepted "
                                            r"values: a list of ints, or an array of any "
                                            r"integer dtype\)"):
            pool.commit(value)
        assert pool.round_open()
    # A memoryview of an integer array is that array (uint8 too: only bytes are refused).
    pool.commit(memoryview(np.array([2], np.uint8)))
    assert not pool.round_open()
    with pytest.raises(TypeError, match="view: expected a pool view or an array with __dlpack__, "
                                        "got list"):
        specstate.to_numpy([1, 2])


# --- bad input ------------------------------------------------------------------------------

def open_round(model, pool, T=4):
    h = pool.acquire()
    pool.begin_verify(specstate.VerifyBatch([h], window=T))
    return h, model.inputs(T)[0]


def verified_round(model, pool, T=4):
    """A round of one new request whose every layer is verified: ready to commit."""
    h = pool.acquire()
    pool.begin_verify(specstate.VerifyBatch([h], window=T))
    for layer, (x, a, b) in enumerate(model.inputs(T)):
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), model.outputs(T))
    return h


def test_bad_dtype_names_argument():
    model = Model()
    x, a, b = model.inputs(4)[0]
    with pytest.raises(TypeError, match=r"inputs\.mixed_qkv: dtype float64"):
        specstate.GdnInputs(x.astype(np.float64), a, b)
    with pytest.raises(TypeError, match=r"inputs\.a: dtype float16"):
        specstate.GdnInputs(x, a.astype(np.float16), b)
    with pytest.raises(TypeError, match=r"inputs\.b: expected an array .* got str"):
        specstate.GdnInputs(x, a, "nope")
    with pytest.raises(TypeError, match=r"weights\.conv_weight: dtype int64"):
        specstate.GdnWeights(conv_weight=np.zeros((4, 4), np.int64), A_log=a[0], dt_bias=a[0])


def test_bad_shape_names_argument():
    model = Model()
    pool = model.pool()
    h, (x, a, b) = open_round(model, pool)
    with pytest.raises(specstate.InvalidArgumentError, match="mixed_qkv") as info:
        pool.verify(0, model.weights[0], specstate.GdnInputs(x[:, :-1], a, b), model.outputs(4))
    assert isinstance(info.value, ValueError)
    assert info.value.status == specstate.Status.INVALID_ARGUMENT
    with pytest.raises(ValueError, match="core_out"):
        out = model.outputs(4)
        out.core_out = np.zeros((3, 4, 16), np.float32)
        pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), out)
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros((4, 4, 16), np.float32)
        ro.flags.writeable = False
        specstate.GdnOutputs(core_out=ro)


def test_bad_protocol_and_values():
    model = Model()
    pool = model.pool(slots=1)
    h, (x, a, b) = open_round(model, pool)
    with pytest.raises(specstate.FailedPreconditionError):  # not every layer verified
        pool.commit([1])
    for layer, (x, a, b) in enumerate(model.inputs(4)):
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), model.outputs(4))
    with pytest.raises(specstate.OutOfRangeError, match=r"accepted\[0\] = 9") as info:
        pool.commit([9])
    assert isinstance(info.value, ValueError)
    # Host arrays of any integer dtype are taken (test_commit_takes_any_host_integer_array...);
    # other dtypes and ranks are not. A float dtype is a TypeError, float32 as float64 (float32
    # imported and was refused by the pool as an InvalidArgumentError; docs/python.md: a dtype is
    # a TypeError).
    with pytest.raises(TypeError, match="accepted: dtype f32 is no integer dtype"):
        pool.commit(np.array([1], np.float32))
    with pytest.raises(TypeError, match="accepted: dtype float64 is not supported"):
        pool.commit(np.array([1], np.float64))
    with pytest.raises(ValueError, match=r"accepted: int64\[1, 1\] cpu has 2 dimensions"):
        pool.commit(np.array([[1]], np.int64))
    with pytest.raises(TypeError, match="accepted"):
        pool.commit(["x"])
    pool.commit([1])
    with pytest.raises(specstate.ResourceExhaustedError):
        pool.acquire()
    pool.release(h)
    assert not pool.is_live(h)
    with pytest.raises(specstate.FailedPreconditionError):
        pool.slot_index(h)
    with pytest.raises(specstate.Error):
        pool.conv_state(5)
    with pytest.raises(TypeError, match="stream"):
        pool.materialize(stream="fast")


# --- DLPack round trips and strides -----------------------------------------------------------

def test_views_are_zero_copy_and_keep_pool_alive():
    model = Model()
    pool = model.pool()
    h = pool.acquire()
    prefill(pool, model, h, 3)
    view = pool.ssm_state(1)
    assert view.__dlpack_device__() == (1, 0)
    arr = np.from_dlpack(view)
    cfg = model.cfg
    assert arr.shape == (4, cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim)
    assert arr.dtype == np.float32
    again = np.from_dlpack(pool.ssm_state(1))
    assert np.shares_memory(arr, again)  # both are the pool's memory
    slot = pool.slot_index(h)
    assert np.any(arr[slot] != 0)
    expect = arr.copy()
    del pool, view, again
    gc.collect()
    assert np.array_equal(arr, expect)  # the array keeps the pool alive


def test_bf16_views():
    model = Model(act=DType.BF16)
    pool = model.pool()
    h = pool.acquire()
    prefill(pool, model, h, 3)
    conv = specstate.to_numpy(pool.conv_state(0))
    assert conv.dtype.name == "bfloat16"
    assert conv.shape == (4, model.cfg.conv_dim(), model.cfg.conv_width - 1)
    assert np.any(conv[pool.slot_index(h)].astype(np.float32) != 0)
    assert specstate.describe(conv).startswith("bf16[4, ")


def test_outputs_written_in_place():
    model = Model()
    pool = model.pool()
    h, (x, a, b) = open_round(model, pool)
    core = np.zeros((4, 4, 16), np.float32)
    out = specstate.GdnOutputs(core_out=core)
    assert out.core_out is core and out.conv_out is None
    pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), out)
    assert np.any(core != 0)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_strided_arrays(strategy):
    """Non-contiguous inputs and outputs (every other row of larger arrays, transposed
    weights) give the same bits as contiguous ones."""
    model = Model()
    T = 4
    window = model.inputs(T)

    def run(strided):
        pool = model.pool(strategy)
        h = pool.acquire()
        pool.begin_verify(specstate.VerifyBatch([h], window=T))
        cores = []
        for layer, (x, a, b) in enumerate(window):
            w = model.weights[layer]
            if strided:
                big = np.zeros((2 * T, x.shape[1] + 3), np.float32)
                big[::2, 1:1 + x.shape[1]] = x
                xs = big[::2, 1:1 + x.shape[1]]
                at = np.ascontiguousarray(a.T).T  # column-major [T, HV]
                core_buf = np.zeros((4, 16, T * 2), np.float32)
                core = core_buf[:, :, ::2].transpose(2, 0, 1)  # [T, HV, V], odd strides
                cw = np.ascontiguousarray(w.conv_weight.T).T
                weights = specstate.GdnWeights(conv_weight=cw, A_log=w.A_log, dt_bias=w.dt_bias)
                assert not xs.flags.c_contiguous and not core.flags.c_contiguous
                inputs, out = specstate.GdnInputs(xs, at, b), specstate.GdnOutputs(core_out=core)
            else:
                weights, inputs = w, specstate.GdnInputs(x, a, b)
                out = specstate.GdnOutputs(core_out=np.zeros((T, 4, 16), np.float32))
            pool.verify(layer, weights, inputs, out)
            cores.append(np.array(out.core_out))
        pool.commit([3])
        return cores, states(pool, model.layers)

    c0, s0 = run(False)
    c1, s1 = run(True)
    for x, y in zip(c0, c1):
        assert np.array_equal(x, y) and np.any(x != 0)
    for (a0, b0), (a1, b1) in zip(s0, s1):
        assert np.array_equal(a0, a1) and np.array_equal(b0, b1)
    assert any(np.any(b0 != 0) for _, b0 in s0)


def test_describe_strides():
    x = np.zeros((6, 10), np.float32)[::2, 3:]
    assert specstate.describe(x) == "f32[3, 7] strides [20, 1] cpu"
    assert specstate.describe(np.zeros(3, np.int32)) == "i32[3] strides [1] cpu"


def test_configs_and_enums():
    cfg = specstate.GdnConfig()
    assert (cfg.num_k_heads, cfg.num_v_heads, cfg.head_k_dim) == (16, 32, 128)
    assert cfg.act_dtype == DType.BF16 and cfg.scale is None
    cfg.scale = 0.5
    assert cfg.effective_scale() == 0.5
    cfg.scale = None
    assert abs(cfg.effective_scale() - 128 ** -0.5) < 1e-7
    # Of a config that validates (K = 0 gave inf, K = -4 nan), as conv_dim() is.
    for config in (specstate.GdnConfig, specstate.KdaConfig):
        for k in (0, -4):
            with pytest.raises(specstate.InvalidArgumentError, match=f"head_k_dim = {k}"):
                config(head_k_dim=k).effective_scale()
    model = specstate.ModelConfig.gated_delta_net(36, specstate.GdnConfig())
    assert model.slot_bytes() == 77266944
    opts = specstate.PoolOptions(num_slots=3, strategy=Strategy.REPLAY, stream=0)
    assert (opts.num_slots, opts.strategy, opts.stream) == (3, Strategy.REPLAY, 0)
    assert specstate.strategy_name(Strategy.REPLAY) == "replay"
    assert specstate.__version__ == specstate.version()
    # One version: the library's is the package's (both from CMakeLists.txt's project()).
    import importlib.metadata

    try:
        assert importlib.metadata.version("specstate") == specstate.version()
    except importlib.metadata.PackageNotFoundError:
        pass  # imported from a build folder, not installed: no metadata to compare
    bad = specstate.ModelConfig.gated_delta_net(1, specstate.GdnConfig(num_v_heads=3))
    with pytest.raises(specstate.InvalidArgumentError):
        bad.validate()


def test_config_sizes_need_a_config_that_validates():
    """The size accessors of the configs refuse an unvalidated config with the validation's error
    naming the field and value: the product of three fields of 2**31 - 1 passed 64 bits (signed
    overflow in C++), a negative field gave a negative size."""
    big = 2**31 - 1
    for cls in (specstate.GdnConfig, specstate.KdaConfig):
        c = cls(num_k_heads=big, num_v_heads=big, head_k_dim=big, head_v_dim=big)
        for size in (c.conv_dim, c.ssm_state_elems):
            with pytest.raises(specstate.InvalidArgumentError, match="2147483647"):
                size()
        c = cls(num_k_heads=2, num_v_heads=-4, head_k_dim=8, head_v_dim=8)
        with pytest.raises(specstate.InvalidArgumentError, match="num_v_heads = -4"):
            c.conv_dim()
    m = specstate.Mamba2Config()
    m.num_heads = -1
    for size in (m.conv_dim, m.ssm_state_elems):
        with pytest.raises(specstate.InvalidArgumentError, match="num_heads = -1"):
            size()
    model = specstate.ModelConfig.mamba2(2, m)
    for size in (model.conv_dim, model.conv_state_elems, model.ssm_state_elems, model.slot_bytes):
        with pytest.raises(specstate.InvalidArgumentError, match="num_heads = -1"):
            size()
    # Valid configs: the values as before.
    g = specstate.GdnConfig()
    assert g.conv_dim() == 2 * 16 * 128 + 32 * 128 and g.ssm_state_elems() == 32 * 128 * 128
    ok = specstate.ModelConfig.gated_delta_net(36, g)
    assert ok.conv_dim() == g.conv_dim() and ok.conv_state_elems() == g.conv_dim() * 3
    assert ok.slot_bytes() == 77266944
    n = specstate.Mamba2Config()
    assert n.conv_dim() == n.num_heads * n.head_dim + 2 * n.n_groups * n.d_state


def test_replay_needs_no_weights_after_the_verify():
    """Replay's deferred work reads only the pool's records: weights passed as temporaries may be
    poisoned and freed after the verify, and the committed states still match snapshot's."""
    model = Model(seed=5)
    window = model.inputs(4)
    final = []
    for strategy in STRATEGIES:
        pool = model.pool(strategy)
        h = pool.acquire()
        pool.begin_verify(specstate.VerifyBatch([h], window=4))
        for layer, (x, a, b) in enumerate(window):
            w = model.weights[layer]
            cw, al, db = w.conv_weight.copy(), w.A_log.copy(), w.dt_bias.copy()
            temp = specstate.GdnWeights(conv_weight=cw, A_log=al, dt_bias=db)
            pool.verify(layer, temp, specstate.GdnInputs(x, a, b), model.outputs(4))
            for arr in (cw, al, db):
                arr[...] = np.nan
            del temp, cw, al, db
        pool.commit([3])
        gc.collect()
        np.ones(100000, np.float32)  # reuse freed memory, if any was freed
        final.append(states(pool, model.layers))
    for (c0, s0), (c1, s1) in zip(*final):
        assert np.array_equal(c0, c1) and np.array_equal(s0, s1)
        assert np.any(s0 != 0)


def test_verify_batch_list_fields_refuse_in_place_changes():
    """rows / parents / lengths return copies. They compare and index as lists; an in-place change
    raises TypeError naming the field instead of changing a copy nobody reads (a plain list
    copy's append was silently lost); assignment and += change the batch."""
    import copy

    model = Model()
    pool = model.pool()
    h0, h1 = pool.acquire(), pool.acquire()
    batch = specstate.VerifyBatch([h0, h1], window=3, lengths=[3, 1])
    assert batch.rows == [h0, h1] and isinstance(batch.rows, list)
    assert batch.lengths == [3, 1] and batch.parents == []
    for change in (lambda: batch.rows.append(h0), lambda: batch.lengths.__setitem__(0, 2),
                   lambda: batch.parents.extend([-1]), lambda: batch.rows.pop(),
                   lambda: batch.lengths.sort(), lambda: batch.rows.clear()):
        with pytest.raises(TypeError, match=r"VerifyBatch\.\w+ returns a copy"):
            change()
    assert batch.rows == [h0, h1] and batch.lengths == [3, 1]
    batch.rows = [h1]
    batch.lengths = [2]
    assert batch.rows == [h1] and batch.lengths == [2] and batch.is_variable()
    batch.rows += [h0]
    assert batch.rows == [h1, h0]
    plain = copy.deepcopy(batch.rows)
    plain.append(h1)
    assert type(plain) is list and len(plain) == 3 and len(batch.rows) == 2
    empty = specstate.VerifyBatch()
    assert empty.rows == [] and empty.window == 1 and not empty.is_variable()
    assert not empty.is_tree()
    pool.begin_verify(specstate.VerifyBatch([h0, h1], window=2, parents=[-1, 0]))
    assert pool.current_batch.parents == [-1, 0] and pool.current_batch.is_tree()
    pool.abort_round()


def test_every_pool_call_takes_a_stream():
    """docs/python.md: every pool call takes an optional `stream` (ignored by CPU pools)."""
    model = Model()
    pool = model.pool()
    h = pool.acquire(stream=None)
    prefill(pool, model, h, 3)
    slot = pool.slot_index(h)
    before = states(pool, model.layers)
    pool.release(h, stream=None)
    again = pool.adopt(slot, stream=None)  # keeps the state in memory (acquire would zero it)
    assert pool.is_live(again) and pool.slot_index(again) == slot
    after = states(pool, model.layers)
    for (bc, bs), (ac, as_) in zip(before, after):
        assert np.array_equal(bits(bc), bits(ac)) and np.array_equal(bits(bs), bits(as_))
        assert np.any(bs != 0)
    conv = np.from_dlpack(pool.snapshot_conv(0, stream=None))
    ssm = np.from_dlpack(pool.snapshot_ssm(1, stream=None))
    ws = np.from_dlpack(pool.workspace(specstate.Workspace.SNAPSHOT_SSM, 1, stream=None))
    assert conv.shape == (4, 4, model.cfg.conv_dim(), 3) and ssm.shape == ws.shape
    assert ssm.shape == (4, 4, 4, 16, 8)
    assert pool.last_commit_status(stream=None) == specstate.Status.SUCCESS
    with pytest.raises(TypeError):
        pool.acquire(stream="main")

    class Stream:
        """A stream object whose cuda_stream property counts its reads (it was read twice a call:
        a property with side effects ran twice)."""
        reads = 0

        @property
        def cuda_stream(self):
            Stream.reads += 1
            return 0

    pool.last_commit_status(stream=Stream())
    assert Stream.reads == 1


def test_config_and_pool_constants():
    model = Model(act=DType.F32)
    assert model.config.act_dtype() == DType.F32
    kda = specstate.ModelConfig.kda(1, specstate.KdaConfig())
    assert kda.act_dtype() == DType.BF16
    assert specstate.layer_kind_name(specstate.LayerKind.MAMBA2) == "mamba2"
    assert specstate.default_replay_ring(4) == 8
    assert specstate.default_replay_ring(specstate.LayerKind.GATED_DELTA_NET, 4) == 12
    pool = model.pool()
    h = pool.acquire()
    blob = pool.export_slot(h)
    assert len(blob) == pool.slot_state_bytes()
    assert specstate.StatePool.SLOT_STATE_HEADER_BYTES == 64
    assert pool.slot_state_bytes() - 64 == model.config.slot_bytes()


class _Stream:
    def __init__(self, pair):
        self.pair = pair

    def __cuda_stream__(self):
        return self.pair


@pytest.mark.parametrize("value, error, message", [
    (-1, ValueError, r"stream = -1 is not a stream handle"),
    (2**64, ValueError, r"stream = 18446744073709551616 is not a stream handle"),
    (True, TypeError, r"stream: expected a CUDA stream .* got bool"),
    (1.5, TypeError, r"stream: expected a CUDA stream .* got float"),
    (_Stream(5), TypeError, r"__cuda_stream__\(\) returned int, expected a \(version, handle\)"),
    (_Stream((0, "x")), TypeError, r"stream\.__cuda_stream__\(\)\[1\]: expected an int"),
    (_Stream((0, -2)), ValueError, r"stream\.__cuda_stream__\(\)\[1\] = -2 is not a stream"),
])
def test_bad_streams_name_the_argument(value, error, message):
    """A stream that is no handle is refused naming the argument (it raised RuntimeError
    'std::bad_cast' before) and changes nothing."""
    pool = Model().pool()
    free = pool.free_slots()
    with pytest.raises(error, match=message):
        pool.acquire(stream=value)
    assert pool.free_slots() == free
    with pytest.raises(error, match=message):
        specstate.PoolOptions(stream=value)
    assert pool.acquire(stream=_Stream((0, 0))).slot == 0  # CPU pools ignore a valid stream


# --- found by an adoption review (thirteenth session) ---------------------------------------

def test_call_keeps_its_arrays_alive_when_a_field_is_reassigned():
    """A layer call took raw views of the argument structs' arrays, then ran Python code (the
    stream's `cuda_stream`) and released the GIL without a reference of its own: reassigning a
    field there freed the array the call read (a segmentation fault, or other bytes read). The
    call now holds its own references: it computes with the arrays it was given."""
    model = Model(act=DType.F32)
    n = 4096  # inputs of megabytes: a freed one is unmapped, not kept in malloc's free lists
    x, a, b = model.inputs(n)[0]
    ref_pool, pool = model.pool(), model.pool()
    ref_h, h = ref_pool.acquire(), pool.acquire()
    ref_out = model.outputs(n)
    ref_pool.prefill(0, ref_h, model.weights[0], specstate.GdnInputs(x.copy(), a, b), ref_out)

    inp = specstate.GdnInputs(x.copy(), a, b)
    out = model.outputs(n)
    core = out.core_out

    class Stream:
        @property
        def cuda_stream(self):
            inp.mixed_qkv = np.zeros_like(x)  # drops the struct's reference to the input
            out.core_out = np.zeros_like(core)  # and to the output
            gc.collect()
            return 0

    pool.prefill(0, h, model.weights[0], inp, out, stream=Stream())
    assert np.array_equal(bits(core), bits(ref_out.core_out))
    assert np.any(core != 0)
    (c0, s0), = states(pool, 1)
    (c1, s1), = states(ref_pool, 1)
    assert np.array_equal(bits(c0), bits(c1)) and np.array_equal(bits(s0), bits(s1))


def test_handles_and_windows_compare_unequal_to_other_types():
    """`h == None` raised TypeError (no overload); Python's protocol returns NotImplemented, so
    comparisons with other types are False and `in` works over mixed lists."""
    pool = Model().pool()
    h = pool.acquire()
    assert not (h == None)  # noqa: E711
    assert h != "x"
    assert h in [None, h] and None not in [h]
    w = specstate.Window.chain(2)
    assert not (w == None) and w != 2  # noqa: E711
    assert w == specstate.Window.chain(2)


def test_commit_names_a_value_that_does_not_fit():
    """A list value past int32 got "expected a list of int32 values" without its index or value;
    host integer arrays (test_commit_array_and_tuple) name theirs too. Nothing is committed."""
    model = Model()
    pool = model.pool()
    verified_round(model, pool)
    before = states(pool, model.layers)
    for bad, error, message in [
            ([2**31], specstate.OutOfRangeError, r"accepted\[0\] = 2147483648 is out of range"),
            ([1, "x"], TypeError, r"accepted\[1\]: expected an int, got str"),
            (np.array([2**40]), specstate.OutOfRangeError,
             r"StatePool.commit: accepted\[0\] = 1099511627776 does not fit int32"),
            (np.array([2**64 - 1], np.uint64), specstate.OutOfRangeError,
             r"accepted\[0\] = 18446744073709551615 does not fit int32"),
            (np.array([9]), specstate.OutOfRangeError, r"accepted\[0\] = 9")]:
        with pytest.raises(error, match=message):
            pool.commit(bad)
        assert pool.round_open()
        for (c0, s0), (c1, s1) in zip(before, states(pool, model.layers)):
            assert np.array_equal(c0, c1) and np.array_equal(s0, s1)
    pool.commit(np.array([4]))
    assert not pool.round_open()


def test_pool_window_and_rows_past_their_bounds_are_refused():
    """PoolOptions(max_window=2**20) was accepted and sized gigabytes of scratch for windows no
    spec.Window can hold; default_replay_ring(0) answered 6."""
    model = Model()
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"options.max_window = 1048576 is larger than "
                             r"PoolOptions::kMaxWindow = 65536"):
        specstate.StatePool(model.config, specstate.PoolOptions(max_window=2**20))
    with pytest.raises(specstate.InvalidArgumentError, match=r"options.max_rows = 1048577"):
        specstate.StatePool(model.config, specstate.PoolOptions(max_rows=2**20 + 1))
    # Each within its bound, rows x window past 2^26 tokens a round (int32 token offsets, a
    # host parent per row and token of every round).
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"options.max_rows x options.max_window = 1048576 x 65536 = "
                             r"68719476736 tokens a round, more than "
                             r"PoolOptions::kMaxRoundTokens = 67108864"):
        specstate.StatePool(model.config, specstate.PoolOptions(
            max_rows=2**20, max_window=2**16, strategy=specstate.Strategy.REPLAY))
    for bad in (0, -5, 2**16 + 1):
        with pytest.raises(specstate.InvalidArgumentError,
                           match=rf"default_replay_ring: max_window = {bad} must be in \[1, "):
            specstate.default_replay_ring(bad)
        with pytest.raises(specstate.InvalidArgumentError, match="max_window"):
            specstate.default_replay_ring(specstate.LayerKind.KDA, bad)


def test_broadcast_output_is_refused():
    """An output with stride 0 along heads (torch's expand, a writable as_strided view) was
    accepted: every head wrote the same memory, the last write winning."""
    model = Model()
    pool = model.pool()
    h, (x, a, b) = open_round(model, pool)
    out = model.outputs(4)
    core = out.core_out
    out.core_out = np.lib.stride_tricks.as_strided(core, strides=(core.strides[0], 0,
                                                                  core.strides[2]))
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"outputs.core_out .* stride 1 = 0 along \d+ elements"):
        pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), out)
    assert not core.any()


def test_overlapping_output_is_refused():
    """An output over too little memory (a writable as_strided view whose heads lie one element
    apart) was accepted: only a stride of exactly 0 was refused, and 96 outputs landed on 13
    floats (on CUDA, a write race)."""
    model = Model()
    pool = model.pool()
    h, (x, a, b) = open_round(model, pool)
    out = model.outputs(4)
    core = out.core_out
    item = core.itemsize
    out.core_out = np.lib.stride_tricks.as_strided(core, strides=(core.strides[0], item, item))
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"outputs.core_out .* stride 1 = 1 is less than the \d+ elements"):
        pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), out)
    assert not core.any()
    # A view laid out by its own strides (here F-order) is no overlap: accepted.
    out.core_out = np.asfortranarray(np.zeros_like(core))
    pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), out)
    assert out.core_out.any()


def test_input_in_the_pools_memory_is_refused():
    """A layer call's input laid over the pool's own committed state was accepted (only outputs
    were checked): a row's advance rewrites that memory while later rows still read it. Now it
    is refused naming the input, and the round still verifies."""
    model = Model()
    pool = model.pool()
    h, (x, a, b) = open_round(model, pool)
    committed = np.from_dlpack(pool.conv_state(0))
    before = committed.copy()
    flat = committed.reshape(-1)
    assert flat.size >= x.size  # the pool's conv state holds a window's mixed_qkv
    over = flat[:x.size].reshape(x.shape)
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"inputs.mixed_qkv .* overlaps the pool's conv state"):
        pool.verify(0, model.weights[0], specstate.GdnInputs(over, a, b), model.outputs(4))
    np.testing.assert_array_equal(np.from_dlpack(pool.conv_state(0)), before)
    out = model.outputs(4)
    pool.verify(0, model.weights[0], specstate.GdnInputs(x, a, b), out)
    assert out.core_out.any()


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY])
def test_round_of_zero_token_rows_verifies_with_empty_arrays(strategy):
    """numpy gives an array of no elements strides of 0: such outputs were refused as broadcast
    views, so a round whose rows all verify 0 tokens (accepted by begin_verify) could not be
    verified; and a zero-byte export buffer was called "not contiguous"."""
    model = Model()
    pool = model.pool(strategy)
    h0, h1 = pool.acquire(), pool.acquire()
    def snapshot():
        return [bits(s).copy() for pair in states(pool, model.layers) for s in pair]

    before = snapshot()
    pool.begin_verify(specstate.VerifyBatch([h0, h1], window=3, lengths=[0, 0]))
    c, hv = model.cfg.conv_dim(), model.cfg.num_v_heads
    for layer in range(model.layers):
        x, a, b = (np.zeros((0, c), np.float32), np.zeros((0, hv), np.float32),
                   np.zeros((0, hv), np.float32))
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), model.outputs(0))
    pool.commit([0, 0])
    assert all(np.array_equal(u, v) for u, v in zip(snapshot(), before))
    with pytest.raises(specstate.InvalidArgumentError, match=r"dst .* 0 bytes"):
        pool.export_slot(h0, np.zeros(0, np.uint8))


def test_ints_past_their_type_name_the_argument_and_the_value():
    """nanobind's generic "incompatible function arguments" named neither the argument nor the
    value (a property setter was "():"): adopt, workspace, snapshot_*, the layer calls' layer,
    commit(None) and every int field of the option, config, batch and trace classes."""
    model = Model()
    pool = model.pool()
    h = pool.acquire()
    big = 2**31
    x, a, b = model.inputs(1)[0]
    calls = {
        "StatePool.adopt: slot = 2147483648": lambda: pool.adopt(big),
        "StatePool.workspace: layer = 2147483648": lambda: pool.workspace(
            specstate.Workspace.SNAPSHOT_SSM, big),
        "StatePool.snapshot_conv: layer = 2147483648": lambda: pool.snapshot_conv(big),
        "StatePool.snapshot_ssm: layer = 2147483648": lambda: pool.snapshot_ssm(big),
        "StatePool.prefill: layer = 2147483648": lambda: pool.prefill(
            big, h, model.weights[0], specstate.GdnInputs(x, a, b), model.outputs(1)),
        "StatePool.decode: layer = 2147483648": lambda: pool.decode(
            big, [h], model.weights[0], specstate.GdnInputs(x, a, b), model.outputs(1)),
    }
    for message, call in calls.items():
        with pytest.raises(specstate.OutOfRangeError, match=message):
            call()
    with pytest.raises(TypeError, match="layer: expected an int, got str"):
        pool.snapshot_ssm("0")
    # None is no int either: the same named TypeError, not nanobind's "incompatible arguments".
    none_calls = {
        "ssm_state": lambda: pool.ssm_state(None),
        "conv_state": lambda: pool.conv_state(None, h),
        "snapshot_conv": lambda: pool.snapshot_conv(None),
        "workspace": lambda: pool.workspace(specstate.Workspace.SNAPSHOT_SSM, None),
        "prefill": lambda: pool.prefill(None, h, model.weights[0], specstate.GdnInputs(x, a, b),
                                        model.outputs(1)),
        "decode": lambda: pool.decode(None, [h], model.weights[0], specstate.GdnInputs(x, a, b),
                                      model.outputs(1)),
    }
    for name, call in none_calls.items():
        with pytest.raises(TypeError, match="layer: expected an int, got NoneType"):
            call()
    with pytest.raises(TypeError, match="slot: expected an int, got NoneType"):
        pool.adopt(None)
    with pytest.raises(TypeError, match="accepted: None"):
        pool.commit(None)
    fields = [(specstate.PoolOptions(), "num_slots"), (specstate.PoolOptions(), "replay_ring"),
              (specstate.GdnConfig(), "head_k_dim"), (specstate.Mamba2Config(), "d_state"),
              (specstate.KdaConfig(), "num_v_heads"), (model.config, "num_layers"),
              (specstate.VerifyBatch(), "window"), (specstate.Acceptance(), "bonus_token")]
    for obj, field in fields:
        before = getattr(obj, field)
        name = f"{type(obj).__name__}.{field}"
        with pytest.raises(specstate.OutOfRangeError,
                           match=rf"{name} = 2147483648 is out of range"):
            setattr(obj, field, big)
        with pytest.raises(TypeError, match=rf"{name}: expected an int, got (NoneType|bool)"):
            setattr(obj, field, None)
        with pytest.raises(TypeError, match=rf"{name}: expected an int, got bool"):
            setattr(obj, field, True)
        assert getattr(obj, field) == before
        setattr(obj, field, np.int64(3))
        assert getattr(obj, field) == 3
    # The keyword constructors name the field and the value alike (they said "kwargs = {
    # num_slots: int }"), and a bool is no count (PoolOptions(num_slots=True) was 1).
    for cls, field in ((specstate.PoolOptions, "replay_fold_rows"),
                       (specstate.GdnConfig, "head_v_dim"), (specstate.KdaConfig, "conv_width"),
                       (specstate.Mamba2Config, "n_groups")):
        name = f"{cls.__name__}.{field}"
        with pytest.raises(specstate.OutOfRangeError,
                           match=rf"{name} = -2147483649 is out of range"):
            cls(**{field: -2**31 - 1})
        with pytest.raises(TypeError, match=rf"{name}: expected an int, got bool"):
            cls(**{field: True})
        with pytest.raises(TypeError, match=rf"{name}: expected an int, got NoneType"):
            cls(**{field: None})
        assert getattr(cls(**{field: np.int32(5)}), field) == 5
    with pytest.raises(specstate.OutOfRangeError, match=r"VerifyBatch.window = 2147483648"):
        specstate.VerifyBatch([], big)
    with pytest.raises(specstate.OutOfRangeError,
                       match=r"ModelConfig.gated_delta_net: num_layers = 2147483648"):
        specstate.ModelConfig.gated_delta_net(big, model.cfg)
    with pytest.raises(specstate.OutOfRangeError,
                       match=r"generate_fixed: accepted_length = 2147483648"):
        specstate.generate_fixed(specstate.TraceShape(), big)
    with pytest.raises(specstate.OutOfRangeError, match=r"TraceShape.seed = -1 is out of range"):
        specstate.TraceShape(seed=-1)
    with pytest.raises(TypeError, match=r"TraceShape.rounds: expected an int, got NoneType"):
        specstate.TraceShape(rounds=None)
    shape = specstate.TraceShape()
    with pytest.raises(specstate.OutOfRangeError, match=r"TraceShape.seed = -1 is out of range"):
        shape.seed = -1
    shape.seed = 2**64 - 1
    assert shape.seed == 2**64 - 1


def test_float_fields_refuse_values_float32_cannot_hold():
    """GdnConfig(scale=1e-300) stored 0.0 silently, refused later as "scale = 0.000000"; a value
    float32 rounds to 0 or to infinity is refused when set, naming the field and the value, and
    the config checks print what was set (%.9g, not std::to_string)."""
    for make, name, tiny, huge in (
            (lambda v: specstate.GdnConfig(scale=v), "GdnConfig.scale", True, True),
            (lambda v: specstate.KdaConfig(lower_bound=v), "KdaConfig.lower_bound", True, True),
            (lambda v: specstate.Mamba2Config(dt_min=v), "Mamba2Config.dt_min", False, True),
            (lambda v: specstate.Mamba2Config(dt_max=v), "Mamba2Config.dt_max", True, False)):
        if tiny:
            with pytest.raises(specstate.OutOfRangeError,
                               match=rf"{name} = 1e-300 is out of float32's range "
                                     r"\(it would be 0\)"):
                make(1e-300)
        if huge:
            with pytest.raises(specstate.OutOfRangeError, match=rf"{name} = 1e\+300 .* infinite"):
                make(1e300)
        with pytest.raises(TypeError, match=rf"{name}: expected a float or None, got str"):
            make("1")
    # dt_min rounded to 0 and dt_max to infinity mean what was asked (no clamp beyond float32's
    # range): taken, as before.
    assert specstate.Mamba2Config(dt_min=1e-300).dt_min == 0.0
    assert specstate.Mamba2Config(dt_max=1e300).dt_max == float("inf")
    m2 = specstate.Mamba2Config()
    m2.dt_max = 1.7976931348623157e308
    assert m2.dt_max == float("inf")
    config = specstate.GdnConfig()
    with pytest.raises(specstate.OutOfRangeError, match=r"GdnConfig.scale = 1e-50"):
        config.scale = 1e-50
    assert config.scale is None
    config.scale = np.float32(0.5)
    assert config.scale == 0.5
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"gdn.scale = -1.00000001e-10: must be finite and positive"):
        specstate.ModelConfig.gated_delta_net(1, specstate.GdnConfig(scale=-1e-10)).validate()
    # Values whose conversion to a double fails or loses them name the field too: an int past a
    # double's range (a bare OverflowError before), an array of several values (NumPy's
    # TypeError), a nonzero Fraction whose double is 0 (stored as 0.0, refused later as "0").
    from fractions import Fraction

    with pytest.raises(specstate.OutOfRangeError, match=r"GdnConfig.scale: int .*too large"):
        specstate.GdnConfig(scale=10**400)
    with pytest.raises(TypeError, match=r"KdaConfig.lower_bound: ndarray"):
        specstate.KdaConfig(lower_bound=np.array([-1.0, -2.0]))
    with pytest.raises(specstate.OutOfRangeError,
                       match=r"GdnConfig.scale = 1/1000+ is out of float32's range \(it would be 0\)"):
        specstate.GdnConfig(scale=Fraction(1, 10**400))
    assert specstate.Mamba2Config(dt_min=Fraction(1, 10**400)).dt_min == 0.0  # 0 means no clamp
    assert specstate.GdnConfig(scale=Fraction(1, 4)).scale == 0.25


def test_big_endian_array_and_empty_window_say_what_is_wrong():
    """A big-endian array was "expected an array ..., got ndarray"; accept_greedy_chain([], [])
    said "tokens is null"."""
    model = Model()
    pool = model.pool()
    h, (x, a, b) = open_round(model, pool)
    with pytest.raises(TypeError, match=r"inputs.a: dtype >f4 is big-endian"):
        specstate.GdnInputs(x, a.astype(">f4"), b)
    # A field of a structured array (5-byte strides) has no DLPack form: its dtype and strides
    # are named (it was "got ndarray" too).
    rec = np.zeros(a.shape[0] * a.shape[1], dtype=[("v", np.float32), ("pad", np.uint8)])
    field = rec["v"].reshape(a.shape)
    with pytest.raises(TypeError, match=r"inputs.a: a NumPy array of dtype float32 and byte "
                                        r"strides \(\d+, 5\) has no DLPack form"):
        specstate.GdnInputs(x, field, b)
    with pytest.raises(specstate.InvalidArgumentError, match="tokens and target are empty"):
        specstate.accept_greedy_chain([], [])


def test_handle_repr_names_its_pool():
    """Handles of two pools printed the same (slot and generation) yet compared unequal."""
    model = Model()
    a, b = model.pool().acquire(), model.pool().acquire()
    assert a != b and repr(a) != repr(b)
    assert repr(a) == (f"SlotHandle(slot={a.slot}, generation={a.generation}, "
                       f"pool_id={a.pool_id})")


def test_import_slot_errors_describe_the_callers_array():
    """A bad header described the buffer as the i32 view the binding made of it
    ("src (i32[1616] ...)" for a uint8[6464] array)."""
    model = Model()
    pool = model.pool()
    h = pool.acquire()
    blob = np.asarray(pool.export_slot(h), dtype=np.uint8).copy()
    blob[60] ^= 1  # the header's checksum no longer matches
    with pytest.raises(specstate.InvalidArgumentError) as e:
        pool.import_slot(h, blob)
    message = str(e.value)
    assert f"src (uint8[{blob.size}] cpu)" in message and "i32[" not in message, message
    assert message.startswith("invalid argument: StatePool::import_slot: ")
    assert "corrupt slot state header" in message


def test_caller_owned_buffers_stay_exported_while_the_pool_lives():
    """A pool over caller-owned arrays held the Python objects but not their buffer exports: a
    memoryview could be released and its array.array resized (the old block freed) while the pool
    still wrote there; acquire() zeroed 576 bytes of an unrelated bytearray."""
    import array

    layer = specstate.GdnConfig(num_k_heads=1, num_v_heads=1, head_k_dim=16, head_v_dim=16,
                                act_dtype=DType.F32, conv_state_dtype=DType.F32)
    cfg = specstate.ModelConfig.gated_delta_net(1, layer)
    C, W, slots = layer.conv_dim(), layer.conv_width, 2
    conv = array.array("f", [1.0]) * (slots * C * (W - 1))
    ssm = array.array("f", [1.0]) * (slots * 16 * 16)
    mvc = memoryview(conv).cast("B").cast("f", [slots, C, W - 1])
    mvs = memoryview(ssm).cast("B").cast("f", [slots, 1, 16, 16])
    pool = specstate.StatePool(cfg, specstate.PoolOptions(num_slots=slots), committed_conv=[mvc],
                               committed_ssm=[mvs])
    with pytest.raises(BufferError):
        mvc.release()
    with pytest.raises(BufferError):
        conv.extend([1.0] * 100000)  # would move the block under the pool
    h = pool.acquire()
    assert pool.slot_index(h) in (0, 1)
    assert conv.count(0.0) == C * (W - 1)  # the pool zeroed one slot of the caller's memory
    del pool, h
    gc.collect()
    mvc.release()
    mvs.release()
    conv.extend([1.0])  # free again once the pool is gone


def test_to_numpy_keeps_read_only_memory_read_only_and_numpy_errors():
    """to_numpy of read-only bfloat16 memory gave a writable array (the bf16 path imported the
    bits read-only and returned them writable: a write changed a bytes object); an array NumPy
    cannot take at all raised the bf16 path's error naming `x` instead of NumPy's own."""
    import ml_dtypes

    buf = bytes(8)
    ro = specstate.to_numpy(np.frombuffer(buf, dtype=ml_dtypes.bfloat16))
    assert not ro.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        ro[0] = 1.0
    # The bits are exported read-only: NumPy refuses to make the result writable again (the
    # flag alone could be set back, and a write then changed the bytes object).
    with pytest.raises(ValueError, match="WRITEABLE"):
        ro.flags.writeable = True
    with pytest.raises(ValueError, match="WRITEABLE"):
        np.from_dlpack(specstate._specstate._bf16_bits(np.frombuffer(buf, dtype=ml_dtypes.bfloat16))).flags.writeable = True
    assert buf == bytes(8)
    frozen = np.zeros(3, dtype=ml_dtypes.bfloat16)
    frozen.flags.writeable = False
    assert not specstate.to_numpy(frozen).flags.writeable
    rw = np.zeros(3, dtype=ml_dtypes.bfloat16)
    out = specstate.to_numpy(rw)
    out[1] = 2.0
    assert float(rw[1]) == 2.0 and out.flags.writeable
    with pytest.raises(BufferError, match="DLPack"):
        specstate.to_numpy(np.array([object()], dtype=object))
