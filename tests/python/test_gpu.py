"""CUDA backend through torch (skipped without torch, a GPU, or the CUDA backend): verify/commit
against the CPU backend, device-valued commits, CUDA graph capture and replay, and stream
ordering with torch work on another stream."""

import numpy as np
import pytest

import specstate
from specstate import DType, Strategy
from conftest import Model, states

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

STRATEGIES = [Strategy.SNAPSHOT, Strategy.REPLAY]
K = 32  # the CUDA kernels take head_k_dim 32, 64 or 128


def skip_without_cuda_backend(e):
    """A build without the CUDA backend skips; any other refusal (a head size, a grid limit) is a
    failure: python/gpu_check.sh always builds the backend, so a skip there hid real refusals."""
    if "has no CUDA backend" not in str(e):
        raise e
    pytest.skip(f"specstate built without its CUDA backend: {e}")


def cuda_pool(model, strategy, stream=None, slots=4, rows=4, window=4):
    try:
        return specstate.StatePool(model.config, specstate.PoolOptions(
            num_slots=slots, max_rows=rows, max_window=window, strategy=strategy,
            backend=specstate.Backend.CUDA, stream=stream))
    except specstate.NotSupportedError as e:
        skip_without_cuda_backend(e)


def dev(x):
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def dev_weights(w):
    return specstate.GdnWeights(conv_weight=dev(w.conv_weight), A_log=dev(w.A_log),
                                dt_bias=dev(w.dt_bias))


def dev_outputs(n, cfg):
    return specstate.GdnOutputs(
        core_out=torch.zeros(n, cfg.num_v_heads, cfg.head_v_dim, device="cuda"),
        conv_out=torch.zeros(n, cfg.conv_dim(), device="cuda"))


def close(got, want, what, tol=1e-5):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert np.abs(want).max() > 0, f"{what}: the reference is all zero"
    scale = np.abs(want).max()
    err = np.abs(got - want).max() / scale
    assert err <= tol, f"{what}: max rel error {err:.3g} > {tol}"


def gpu_states(pool, layers):
    pool.materialize()
    torch.cuda.synchronize()
    return [(torch.from_dlpack(pool.conv_state(l)).cpu().numpy(),
             torch.from_dlpack(pool.ssm_state(l)).cpu().numpy()) for l in range(layers)]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_cuda_matches_cpu(strategy):
    model = Model(seed=11, head_k_dim=K)
    cpu = model.pool(strategy)
    gpu = cuda_pool(model, strategy)
    dw = [dev_weights(w) for w in model.weights]
    hc, hg = [cpu.acquire(), cpu.acquire()], [gpu.acquire(), gpu.acquire()]
    rng = np.random.default_rng(2)
    T, B = 4, 2
    for r in range(5):
        window = model.inputs(B * T)
        accepted = [int(x) for x in rng.integers(0, T + 1, B)]
        cpu.begin_verify(specstate.VerifyBatch(hc, window=T))
        gpu.begin_verify(specstate.VerifyBatch(hg, window=T))
        for layer, (x, a, b) in enumerate(window):
            co = model.outputs(B * T)
            cpu.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), co)
            go = dev_outputs(B * T, model.cfg)
            gpu.verify(layer, dw[layer], specstate.GdnInputs(dev(x), dev(a), dev(b)), go)
            close(go.core_out.cpu().numpy(), co.core_out, f"round {r} layer {layer} core_out")
        cpu.commit(accepted)
        gpu.commit(torch.tensor(accepted, dtype=torch.int32, device="cuda"))
        assert gpu.last_commit_status() == specstate.Status.SUCCESS
    for layer, ((cc, cs), (gc_, gs)) in enumerate(zip(states(cpu, 2), gpu_states(gpu, 2))):
        close(gc_, cc, f"layer {layer} conv")
        close(gs, cs, f"layer {layer} ssm")


def test_device_commit_out_of_range_is_reported_and_commits_no_row():
    model = Model(head_k_dim=K)
    gpu = cuda_pool(model, Strategy.SNAPSHOT)
    dw = [dev_weights(w) for w in model.weights]
    h0, h1 = gpu.acquire(), gpu.acquire()
    layers = len(model.weights)

    def ssm():
        return [torch.from_dlpack(gpu.ssm_state(layer)).clone() for layer in range(layers)]

    def round_(values):
        gpu.begin_verify(specstate.VerifyBatch([h0, h1], window=4))
        for layer, (x, a, b) in enumerate(model.inputs(8)):
            gpu.verify(layer, dw[layer], specstate.GdnInputs(dev(x), dev(a), dev(b)),
                       dev_outputs(8, model.cfg))
        gpu.commit(torch.tensor(values, dtype=torch.int32, device="cuda"))

    before = ssm()
    # Row 0's value is valid, row 1's is not: all-or-nothing, neither row commits.
    round_([2, 9])
    assert gpu.last_commit_status() == specstate.Status.OUT_OF_RANGE
    for layer, (got, want) in enumerate(zip(ssm(), before)):
        assert torch.equal(got, want), f"layer {layer} was written"
    # The pool goes on: a valid round commits both rows.
    round_([2, 3])
    assert gpu.last_commit_status() == specstate.Status.SUCCESS
    assert any(not torch.equal(got, want) for got, want in zip(ssm(), before))


def test_views_are_torch_tensors_on_the_device():
    model = Model(head_k_dim=K)
    gpu = cuda_pool(model, Strategy.SNAPSHOT)
    v = gpu.ssm_state(0)
    assert v.__dlpack_device__()[0] == 2  # kDLCUDA
    t = torch.from_dlpack(v)
    assert t.is_cuda and t.shape == (4, 4, 16, K) and t.dtype == torch.float32
    with pytest.raises(ValueError, match=r"inputs\.mixed_qkv"):
        # a CPU array into a CUDA pool is named
        x, a, b = model.inputs(4)[0]
        gpu.begin_verify(specstate.VerifyBatch([gpu.acquire()], window=4))
        gpu.verify(0, dev_weights(model.weights[0]), specstate.GdnInputs(x, dev(a), dev(b)),
                   dev_outputs(4, model.cfg))


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_graph_capture_and_replay(strategy):
    """verify of every layer + commit (device accepted lengths) captured once under
    torch.cuda.graph, replayed with new inputs and accepted values, against the CPU backend."""
    model = Model(seed=21, head_k_dim=K)
    T, B = 4, 3
    s = torch.cuda.Stream()
    gpu = cuda_pool(model, strategy, stream=s.cuda_stream)
    cpu = model.pool(strategy)
    dw = [dev_weights(w) for w in model.weights]
    hg = [gpu.acquire() for _ in range(B - 1)] + [specstate.SlotHandle.padding()]
    hc = [cpu.acquire() for _ in range(B - 1)] + [specstate.SlotHandle.padding()]
    c, hv = model.cfg.conv_dim(), model.cfg.num_v_heads
    static_in = [specstate.GdnInputs(torch.zeros(B * T, c, device="cuda"),
                                     torch.zeros(B * T, hv, device="cuda"),
                                     torch.zeros(B * T, hv, device="cuda")) for _ in dw]
    static_out = [dev_outputs(B * T, model.cfg) for _ in dw]
    accepted_dev = torch.zeros(B, dtype=torch.int32, device="cuda")
    batch = specstate.VerifyBatch(hg, window=T)

    def round_body():
        for layer in range(model.layers):
            gpu.verify(layer, dw[layer], static_in[layer], static_out[layer])
        gpu.commit(accepted_dev)

    # warm up on the capture stream (accepted 0: nothing changes), then capture; the arrays
    # above were zero-filled on torch's default stream, which s does not wait for
    torch.cuda.synchronize()
    gpu.begin_verify(batch)
    with torch.cuda.stream(s):
        round_body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    gpu.begin_verify(batch)
    with torch.cuda.graph(graph, stream=s):
        round_body()
    rng = np.random.default_rng(5)
    for r in range(6):
        window = model.inputs(B * T)
        accepted = [int(x) for x in rng.integers(0, T + 1, B - 1)] + [0]
        with torch.cuda.stream(s):
            for layer, (x, a, b) in enumerate(window):
                static_in[layer].mixed_qkv.copy_(dev(x))
                static_in[layer].a.copy_(dev(a))
                static_in[layer].b.copy_(dev(b))
            accepted_dev.copy_(torch.tensor(accepted, dtype=torch.int32))
            # On s, after the writes above: replay() launches on torch's current stream, and a
            # torch.cuda.Stream() does not synchronize with the default stream.
            gpu.begin_verify(batch)
            graph.replay()
        cpu.begin_verify(specstate.VerifyBatch(hc, window=T))
        outs = []
        for layer, (x, a, b) in enumerate(window):
            o = model.outputs(B * T)
            cpu.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), o)
            outs.append(o)
        cpu.commit(accepted)
        s.synchronize()
        assert gpu.last_commit_status() == specstate.Status.SUCCESS
        for layer in range(model.layers):
            got = static_out[layer].core_out.cpu().numpy()[: (B - 1) * T]
            close(got, outs[layer].core_out[: (B - 1) * T], f"replay {r} layer {layer}")
    with torch.cuda.stream(s):
        got = gpu_states(gpu, model.layers)
    for layer, ((cc, cs), (gc_, gs)) in enumerate(zip(states(cpu, model.layers), got)):
        close(gs, cs, f"layer {layer} ssm")
        close(gc_, cc, f"layer {layer} conv")


def test_stream_ordering_with_torch_work():
    """Inputs written by torch on another stream after a long sleep: a verify given that stream
    sees them, and torch work queued after it on that stream sees the outputs."""
    model = Model(seed=31, head_k_dim=K)
    pool_stream = torch.cuda.Stream()
    gpu = cuda_pool(model, Strategy.REPLAY, stream=pool_stream.cuda_stream)
    cpu = model.pool(Strategy.REPLAY)
    h, hc = gpu.acquire(), cpu.acquire()
    dw = [dev_weights(w) for w in model.weights]
    T = 4
    window = model.inputs(T)
    work = torch.cuda.Stream()
    results = []
    with torch.cuda.stream(work):
        gpu.begin_verify(specstate.VerifyBatch([h], window=T), stream=work.cuda_stream)
        for layer, (x, a, b) in enumerate(window):
            host = [torch.from_numpy(v).pin_memory() for v in (x, a, b)]
            torch.cuda._sleep(50_000_000)  # keeps `work` busy: an unordered verify reads zeros
            ins = [torch.zeros(v.shape, device="cuda") for v in host]
            for d, hsrc in zip(ins, host):
                d.copy_(hsrc, non_blocking=True)
            out = dev_outputs(T, model.cfg)
            gpu.verify(layer, dw[layer], specstate.GdnInputs(*ins), out, stream=work)
            results.append(out.core_out * 1.0)  # torch work after the verify, same stream
        gpu.commit([3], stream=work.cuda_stream)
    work.synchronize()
    cpu.begin_verify(specstate.VerifyBatch([hc], window=T))
    for layer, (x, a, b) in enumerate(window):
        o = model.outputs(T)
        cpu.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), o)
        close(results[layer].cpu().numpy(), o.core_out, f"layer {layer} core_out")
    cpu.commit([3])
    gpu.stream = work.cuda_stream  # settable between rounds
    assert gpu.stream == work.cuda_stream
    got = gpu_states(gpu, model.layers)
    for layer, ((cc, cs), (gc_, gs)) in enumerate(zip(states(cpu, model.layers), got)):
        close(gs, cs, f"layer {layer} ssm")


def test_bf16_torch_inputs():
    model = Model(act=DType.BF16, seed=41, head_k_dim=K)
    cpu = model.pool(Strategy.SNAPSHOT)
    gpu = cuda_pool(model, Strategy.SNAPSHOT)
    hc, hg = cpu.acquire(), gpu.acquire()
    bf = lambda x: torch.from_numpy(np.ascontiguousarray(x).view(np.uint16).astype(np.int32)
                                    ).to(torch.int16).view(torch.bfloat16).cuda()  # noqa: E731
    dw = [specstate.GdnWeights(conv_weight=bf(w.conv_weight), A_log=bf(w.A_log),
                               dt_bias=bf(w.dt_bias)) for w in model.weights]
    T = 4
    cpu.begin_verify(specstate.VerifyBatch([hc], window=T))
    gpu.begin_verify(specstate.VerifyBatch([hg], window=T))
    cfg = model.cfg
    for layer, (x, a, b) in enumerate(model.inputs(T)):
        co = model.outputs(T)
        cpu.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), co)
        go = specstate.GdnOutputs(core_out=torch.zeros(T, cfg.num_v_heads, cfg.head_v_dim,
                                                       dtype=torch.bfloat16, device="cuda"))
        gpu.verify(layer, dw[layer], specstate.GdnInputs(bf(x), bf(a), bf(b)), go)
        close(go.core_out.float().cpu().numpy(), co.core_out.astype(np.float32),
              f"layer {layer} bf16 core_out", tol=2e-2)
    cpu.commit([2])
    gpu.commit([2])


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_cuda_pool_over_torch_state_tensors(strategy):
    """An engine's own [L, slots, ...] torch tensors (padded slot stride) adopted by a CUDA pool,
    with variable windows and a batched prefill: bit-identical to an owning CUDA pool, written in
    place, padding untouched."""
    model = Model(seed=21, head_k_dim=K)
    cfg, L, slots = model.cfg, model.layers, 4
    c, w = cfg.conv_dim(), cfg.conv_width
    hv, v, k = cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim
    conv_all = torch.full((L, slots, c * (w - 1) + 4), 7.0, device="cuda")  # 16-byte padding
    ssm_all = torch.full((L, slots, hv * v * k + 4), 7.0, device="cuda")
    conv_views = [conv_all[l, :, :c * (w - 1)].unflatten(1, (c, w - 1)) for l in range(L)]
    ssm_views = [ssm_all[l, :, :hv * v * k].unflatten(1, (hv, v, k)) for l in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=4, max_window=4, strategy=strategy,
                                 backend=specstate.Backend.CUDA)
    try:
        caller = specstate.StatePool(model.config, opts, committed_conv=conv_views,
                                     committed_ssm=ssm_views)
    except specstate.NotSupportedError as e:
        skip_without_cuda_backend(e)
    own = cuda_pool(model, strategy, slots=slots)
    weights = [dev_weights(wt) for wt in model.weights]
    hc = [caller.acquire() for _ in range(2)]
    ho = [own.acquire() for _ in range(2)]
    lengths = [3, 2]
    for layer, (x, a, b) in enumerate(model.inputs(5)):
        inp = specstate.GdnInputs(dev(x), dev(a), dev(b))
        caller.prefill_batch(layer, hc, lengths, weights[layer], inp, dev_outputs(5, cfg))
        own.prefill_batch(layer, ho, lengths, weights[layer], inp, dev_outputs(5, cfg))
    for pool, hs in ((caller, hc), (own, ho)):
        pool.begin_verify(specstate.VerifyBatch(hs, window=4, lengths=[4, 1]))
    for layer, (x, a, b) in enumerate(model.inputs(5)):
        inp = specstate.GdnInputs(dev(x), dev(a), dev(b))
        oc, oo = dev_outputs(5, cfg), dev_outputs(5, cfg)
        caller.verify(layer, weights[layer], inp, oc)
        own.verify(layer, weights[layer], inp, oo)
        torch.cuda.synchronize()
        assert torch.equal(oc.core_out, oo.core_out) and oc.core_out.abs().sum() > 0
    caller.commit([3, 1])
    own.commit([3, 1])
    gc_, go = gpu_states(caller, L), gpu_states(own, L)
    for h in hc:
        s = caller.slot_index(h)
        for (cc, sc), (co, so) in zip(gc_, go):
            assert np.array_equal(cc[s], co[s]) and np.array_equal(sc[s], so[s])
            assert np.abs(so[s]).sum() > 0  # (both pools' state writes as no-ops would pass)
        assert torch.equal(conv_views[0][s].cpu(), torch.from_numpy(go[0][0][s]))
    torch.cuda.synchronize()
    assert (conv_all[:, :, c * (w - 1):] == 7.0).all() and (ssm_all[:, :, hv * v * k:] == 7.0).all()
    assert (ssm_all[:, 2:] == 7.0).all()  # slots never acquired are untouched


def test_caller_state_on_another_gpu_than_the_pools_is_refused_naming_it():
    """The committed-state constructor did not compare the arrays' GPU with options.device (every
    other array argument was): a rank's tensors on cuda:0 were adopted by a pool of cuda:1. One
    GPU suffices: the arrays are refused before the pool touches device 1."""
    model = Model(seed=21, head_k_dim=K)
    cfg, L, slots = model.cfg, model.layers, 2
    conv = [torch.zeros(slots, cfg.conv_dim(), cfg.conv_width - 1, device="cuda:0")
            for _ in range(L)]
    ssm = [torch.zeros(slots, cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim, device="cuda:0")
           for _ in range(L)]
    opts = specstate.PoolOptions(num_slots=slots, max_rows=1, max_window=2,
                                 backend=specstate.Backend.CUDA, device=1)
    with pytest.raises(ValueError, match=r"committed_conv\[0\]: array on cuda:0, the pool is on "
                                         r"cuda:1"):
        specstate.StatePool(model.config, opts, committed_conv=conv, committed_ssm=ssm)
    assert (ssm[0] == 0).all()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_device_cu_seqlens_equals_host_lengths(strategy):
    """The same round with host lengths and with a device cu_seqlens tensor (inputs sized for
    the static maximum): identical outputs and states."""
    model = Model(seed=23, head_k_dim=K)
    cfg = model.cfg
    pools = [cuda_pool(model, strategy), cuda_pool(model, strategy)]
    weights = [dev_weights(w) for w in model.weights]
    hs = [[p.acquire(), p.acquire()] for p in pools]
    lengths = [3, 1]
    T, B = 4, 2
    window = model.inputs(B * T)
    pools[0].begin_verify(specstate.VerifyBatch(hs[0], window=T, lengths=lengths))
    cu = torch.tensor([0, 3, 4], dtype=torch.int32, device="cuda")
    pools[1].begin_verify(specstate.VerifyBatch(hs[1], window=T), cu_seqlens=cu)
    for layer, (x, a, b) in enumerate(window):
        o0, o1 = dev_outputs(4, cfg), dev_outputs(B * T, cfg)
        pools[0].verify(layer, weights[layer],
                        specstate.GdnInputs(dev(x[:4]), dev(a[:4]), dev(b[:4])), o0)
        pools[1].verify(layer, weights[layer], specstate.GdnInputs(dev(x), dev(a), dev(b)), o1)
        torch.cuda.synchronize()
        assert torch.equal(o0.core_out, o1.core_out[:4]) and o0.core_out.abs().sum() > 0
    for p in pools:
        p.commit([2, 1])
    for (c0, s0), (c1, s1) in zip(gpu_states(pools[0], model.layers),
                                  gpu_states(pools[1], model.layers)):
        assert np.array_equal(c0, c1) and np.array_equal(s0, s1)
        assert np.abs(s0).sum() > 0  # (both pools' state writes as no-ops would pass)


def advance_both(cpu, gpu, model, hc, hg, seed):
    """The same round on a CPU and a CUDA pool (accepted 3, pending under replay)."""
    model.rng = np.random.default_rng(seed)
    dw = [dev_weights(w) for w in model.weights]
    cpu.begin_verify(specstate.VerifyBatch([hc], window=4))
    gpu.begin_verify(specstate.VerifyBatch([hg], window=4))
    for layer, (x, a, b) in enumerate(model.inputs(4)):
        cpu.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), model.outputs(4))
        gpu.verify(layer, dw[layer], specstate.GdnInputs(dev(x), dev(a), dev(b)),
                   dev_outputs(4, model.cfg))
    cpu.commit([3])
    gpu.commit([3])


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_per_slot_views_on_the_device(strategy):
    model = Model(seed=51, head_k_dim=K)
    cpu, gpu = model.pool(strategy), cuda_pool(model, strategy)
    gpu.acquire()
    hc, hg = cpu.acquire(), gpu.acquire()
    advance_both(cpu, gpu, model, hc, hg, seed=52)
    cfg = model.cfg
    work = torch.cuda.Stream()
    for layer in range(model.layers):
        with torch.cuda.stream(work):
            c = torch.from_dlpack(gpu.conv_state(layer, hg, stream=work.cuda_stream))
            s = torch.from_dlpack(gpu.ssm_state(layer, hg, stream=work))  # a stream object
            assert c.is_cuda and s.is_cuda
            assert c.shape == (cfg.conv_dim(), cfg.conv_width - 1)
            assert s.shape == (cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim)
            whole = torch.from_dlpack(gpu.ssm_state(layer, stream=work))
            i = gpu.slot_index(hg)
            assert s.data_ptr() == whole[i].data_ptr()  # zero-copy: the slot's row
            got_c, got_s = c.cpu().numpy(), s.cpu().numpy()
        close(got_s, np.from_dlpack(cpu.ssm_state(layer, hc)), f"layer {layer} ssm")
        close(got_c, np.from_dlpack(cpu.conv_state(layer, hc)), f"layer {layer} conv")
    with pytest.raises(TypeError, match="handle: expected a SlotHandle"):
        gpu.ssm_state(0, work)  # a stream where the handle goes


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_export_import_buffers_cpu_cuda_handoff(strategy):
    """CPU -> CUDA through a host array, CUDA -> CUDA through a device tensor, CUDA -> CPU through
    the fresh host array: the same bytes all the way, and the slots go on identically."""
    model = Model(seed=53, head_k_dim=K)
    cpu, gpu, gpu2 = model.pool(strategy), cuda_pool(model, strategy), cuda_pool(model, strategy)
    hc, hg0 = cpu.acquire(), gpu.acquire()
    advance_both(cpu, gpu, model, hc, hg0, seed=54)
    n = cpu.slot_state_bytes()
    assert gpu.slot_state_bytes() == n
    host = cpu.export_slot(hc)
    hg = gpu.acquire()
    gpu.import_slot(hg, host)  # a host array into a CUDA pool: done when the call returns
    assert np.array_equal(gpu.export_slot(hg), host)  # a fresh host array from a CUDA pool
    work = torch.cuda.Stream()
    with torch.cuda.stream(work):
        state = torch.empty(n, dtype=torch.uint8, device="cuda")
        gpu.export_slot(hg, state, stream=work)  # a device buffer, ordered with `work`
        h2 = gpu2.acquire()
        gpu2.import_slot(h2, state, stream=work)
        back = state.cpu().numpy()
    work.synchronize()
    assert np.array_equal(back, host)
    hb = cpu.acquire()
    cpu.import_slot(hb, gpu2.export_slot(h2))
    assert np.array_equal(cpu.export_slot(hb), host)
    advance_both(cpu, gpu2, model, hb, h2, seed=55)
    for layer in range(model.layers):
        got = torch.from_dlpack(gpu2.ssm_state(layer, h2)).cpu().numpy()
        close(got, np.from_dlpack(cpu.ssm_state(layer, hb)), f"layer {layer} ssm after hand-off")
    if n % 4 == 0:  # any dtype of n bytes
        f = torch.zeros(n // 4, dtype=torch.float32, device="cuda")
        gpu.export_slot(hg, f)
        torch.cuda.synchronize()
        assert np.array_equal(f.cpu().numpy().view(np.uint8), host)
    with pytest.raises(specstate.InvalidArgumentError,
                       match=rf"dst \(uint8\[{n - 1}\] cuda:0\) holds {n - 1} bytes, expected "
                             rf"pool.slot_state_bytes\(\) = {n}"):
        gpu.export_slot(hg, torch.empty(n - 1, dtype=torch.uint8, device="cuda"))
    with pytest.raises(specstate.InvalidArgumentError, match="src .* lives on cuda, the pool's "
                                                             "backend is cpu"):
        cpu.import_slot(hb, state)
