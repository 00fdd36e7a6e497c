#!/usr/bin/env python3
"""SGLang 0.5.23's circular ReplaySSM ring path for GDN speculative verify, a whole round, timed on
the GPU it runs on (so that specstate's own figures can be compared on the same card).

    python3 tools/sglang_ring_bench.py --json out.json       # T = 2,4,8; B = 1,8,32,128
    python3 tools/sglang_ring_bench.py --check               # ring path vs a torch reference
    TRITON_INTERPRET=1 python3 tools/sglang_ring_bench.py --check --device cpu

SGLang is not installed: its kernel modules are loaded by file path from the sources of the PyPI
wheel, without running any sglang __init__. Prepare the folder (133 kB) with exactly:

    unzip sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \\
        'sglang/kernels/ops/attention/linear/gdn_replayssm_spec_decode.py' \\
        'sglang/kernels/ops/mamba/causal_conv1d_triton.py' \\
        'sglang/kernels/ops/mamba/mamba_state_scatter_triton.py' \\
        'sglang/kernels/ops/memory/ptr_table.py' -d .whl/sglang-0.5.23-src

Stood in (helper predicates only, answering for the device in use): fla.utils.is_tf32_supported
(NVIDIA sm80+), jit.utils.is_arch_support_pdl (NVIDIA sm90+), srt.utils.is_gfx95_supported (ROCm
gfx95), srt.utils.common.get_device_core_count. Kernels and their wrappers are SGLang's, unmodified.

Shapes: Qwen3-Next-80B-A3B at TP1: 36 GDN layers, H=16, HV=32, K=V=128, conv width 4, conv_dim 8192,
bf16 activations and conv state, fp32 SSM state [slots, HV, V, K].

A round, as SGLang 0.5.23 drives --enable-linear-replayssm-spec (Triton path; file:line in the
wheel's sglang/ tree; gdn = srt/layers/attention/linear/gdn_backend.py, ring =
kernels/ops/attention/linear/gdn_replayssm_spec_decode.py):
 per layer (gdn forward_extend, target verify, 1104-1136 -> _replayssm_target_verify 1441-1527):
  1. causal_conv1d_update (gdn 1041-1060): x = mixed_qkv.view(B,T,D).transpose(1,2), the rows'
     mamba slots, the pool's deduplicated conv-window view (srt/mem_cache/memory_pool.py:598-636,
     916-938), intermediate_state_indices = arange (linear/utils.py:111-115), no tree links
     (hybrid_linear_attn_backend.py:171-173, 298), silu, no bias (models/qwen3_next.py:157-165);
     launch_pdl + USE_GDC on sm90+ (kernels/ops/mamba/causal_conv1d_triton.py:1166).
  2. q/k/v = torch.split views of its output (gdn 1078-1102; strided split: gdn 672-673).
  3. gdn_replayssm_spec_decode(launch_mode="verify") (gdn 1488-1524): ONE launch of
     gdn_replayssm_spec_circular_kernel (ring 1159-1193) with the wrapper defaults block_v=64,
     num_warps=1, num_stages=2, nk=2, bs_min=4, dot_precision tf32 on sm80+ (ring 1068-1106);
     STATE_FP32, STORE_D/K_RESIDUAL (rawv/rawk = bf16 low parts, beta None: memory_pool.py:849-862).
 then the commit, all layers at once (srt/speculative/spec_utils.py:1082-1159):
  4. state_batch_indices = req_to_mamba[req_pool_indices] (spec_utils 1098), an index kernel.
  5. commit_gdn_replayssm_spec (ring 1234-1266): the cursor advance (fold_every_commit False for an
     fp32 checkpoint, spec_utils 1121).
  6. commit_gdn_replayssm_circular (ring 1269-1371): gdn_replayssm_compact_commit_kernel over
     (V/64, B, HV*layers) (materialises rows whose ring reached capacity, and snapshots track rows)
     + _finish_gdn_replayssm_circular_fold_kernel.
  7. fused_conv_window_scatter_with_mask (mamba_state_scatter_triton.py:487-567) of the accepted
     window (spec_utils 1144-1150), and again for the track slots (1151-1158) with extra_buffer.
 last_correct_step_indices (accepted-1) and mamba_steps_to_track (int64) come from the sampler's
 fused prepare_verify_commit_outputs (speculative/eagle_worker_common.py:695-742), the accepted
 lengths (int32, bonus token included) from the sampler: all prepared before capture here.

Defaults taken: linear_replayssm_cache_len 16 (--ring; arg_groups/fields/exec_.py:582-585);
mamba_ssm_dtype float32 (set by the flag when unset: arg_groups/attention_hook.py:506-516); conv
dtype bf16 (configs/mamba_utils.py:68); ring d/k bf16, g fp32 (memory_pool.py:775, 793-817); topk 1
(required: attention_hook.py:451); pp stable rows off. Radix-cache track buffer: the mamba radix
strategy default "auto" (exec_.py:512-519) resolves to extra_buffer for Qwen3NextForCausalLM with
the overlap scheduler on (arg_groups/overrides.py:403-412, 477-486), so every batch carries
mamba_track_indices (managers/schedule_batch.py:3802-3813) with mamba_track_interval 256
(exec_.py:530-533): --track-interval 256 models it (rows start at random sequence lengths, a track
step is set when the accepted prefix crosses a multiple of 256). The default here is 0 (no_buffer:
no track slots, no second conv scatter), the round ../shared/baseline measured on the H200 and the
one specstate's bench times (no radix-cache snapshots): the like-for-like comparison.
Ring and cursors are keyed by request slot (int64), checkpoint and conv state by mamba slot (int32):
random permutations of pools of B+8 (+B track) slots.

Timing: per (T, B) random buffers (never zeros); 4 untimed rounds (compile, cursors mid-ring), 16
untimed rounds counting folds (rows whose is_flush is set by the cursor advance = materialised in
that commit); ONE CUDA graph of 4 rounds, each with its own accepted lengths (in [1, T], the
ones our bench draws: graph_timing.bench_accepted, whatever --seed); replays after a 256 MiB L2 flush, events around the replay only, 3 warm-up replays,
median of --reps, /4. Replays keep advancing the cursors (folds on data-dependent rounds).

--check: 2 layers, B=3, vs a sequential fp32 torch reference (conv + gated delta rule, committed
state advanced by the accepted prefix), T=4 x 6 rounds and T=8 x 3 rounds (a fold every commit at
ring 16), track interval 8; outputs and track snapshots must be within 2e-2 relative.
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import types

from graph_timing import bench_accepted, replay_times  # tools/ (the script's own folder)

H, HV, K, V, W = 16, 32, 128, 128, 4
D = 2 * H * K + HV * V  # 8192
SGLANG_VERSION = "0.5.23"
FLUSH_BYTES = 256 << 20
EXTRA_SLOTS = 8
MODULES = {
    "ptr": "sglang.kernels.ops.memory.ptr_table",
    "conv": "sglang.kernels.ops.mamba.causal_conv1d_triton",
    "gdn": "sglang.kernels.ops.attention.linear.gdn_replayssm_spec_decode",
    "scatter": "sglang.kernels.ops.mamba.mamba_state_scatter_triton",
}


def load_sglang(torch, src, device):
    """SGLang's kernel modules loaded by file path; stand-ins for the helper predicates only."""
    repo_rel = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", src)
    if not os.path.isdir(os.path.join(src, "sglang")) and not os.path.isabs(src):
        src = repo_rel  # a relative --sglang-src is also looked up from the repository root
    if not os.path.isdir(os.path.join(src, "sglang")):
        sys.exit(f"--sglang-src {src}: no sglang/ folder (see the docstring to prepare it)")
    dev = torch.device(device)
    on_gpu = dev.type == "cuda"
    cap = torch.cuda.get_device_capability(dev) if on_gpu else (0, 0)
    nvidia = on_gpu and torch.version.hip is None
    arch = torch.cuda.get_device_properties(dev).gcnArchName if on_gpu and not nvidia else ""

    def module(name, package=False, **attrs):
        m = types.ModuleType(name)
        if package:
            m.__path__ = []  # empty: nothing below it can be found on disk, so no __init__ runs
        m.__dict__.update(attrs)
        sys.modules[name] = m

    for pkg in ("sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention",
                "sglang.kernels.ops.attention.fla", "sglang.kernels.ops.attention.linear",
                "sglang.kernels.ops.mamba", "sglang.kernels.ops.memory", "sglang.kernels.jit",
                "sglang.srt"):
        module(pkg, package=True)
    module("sglang.kernels.ops.attention.fla.utils", is_tf32_supported=nvidia and cap[0] >= 8)
    module("sglang.kernels.jit.utils", package=True,
           is_arch_support_pdl=lambda: nvidia and cap[0] >= 9)
    module("sglang.srt.utils", package=True,
           is_gfx95_supported=lambda: (not nvidia) and "gfx95" in arch)
    module("sglang.srt.utils.common", get_device_core_count=lambda device_id=0: (
        torch.cuda.get_device_properties(device_id).multi_processor_count if on_gpu else 0))
    mods = {}
    for key, name in MODULES.items():
        path = os.path.join(src, *name.split(".")) + ".py"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mods[key] = mod
    return types.SimpleNamespace(**mods, tf32=nvidia and cap[0] >= 8, pdl=nvidia and cap[0] >= 9)


def patch_interpreter_bf16():
    """TRITON_INTERPRET only. Triton 3.6's interpreter keeps bf16 values as raw uint16 and hands
    those bit patterns to numpy: bf16 x bf16 arithmetic (the conv's `matrix_x * matrix_w`,
    causal_conv1d_triton.py:968) and tl.dot on bf16 operands (the commit kernel's dots,
    gdn_replayssm_spec_decode.py:733-734) come out as garbage, and fp32 -> bf16 casts truncate.
    This patches the INTERPRETER (not SGLang): bf16 operands are widened to fp32, elementwise
    results rounded back to bf16 and casts rounded to nearest even, as the GPU does."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp

    TH, IB = interp.TensorHandle, interp.InterpreterBuilder
    bf16, f32 = tl.bfloat16, tl.float32

    def up(data):
        return (np.asarray(data).astype(np.uint32) << 16).view(np.float32)

    def down(x):
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    arith = {np.add, np.subtract, np.multiply, np.divide, np.fmod, np.minimum, np.maximum}
    compare = {np.less, np.greater, np.less_equal, np.greater_equal, np.equal, np.not_equal}
    binary_op, create_dot, cast_impl = IB.binary_op, IB.create_dot, IB.cast_impl

    def binary_op_bf16(self, lhs, rhs, op):
        if lhs.dtype.scalar == bf16 and rhs.dtype.scalar == bf16:
            if op in arith:
                return TH(down(op(up(lhs.data), up(rhs.data))), bf16)
            if op in compare:
                return binary_op(self, TH(up(lhs.data), f32), TH(up(rhs.data), f32), op)
        return binary_op(self, lhs, rhs, op)

    def create_dot_bf16(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == bf16:
            a = TH(up(a.data), f32)
        if b.dtype.scalar == bf16:
            b = TH(up(b.data), f32)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl_rne(self, src, dst_type):
        if src.dtype.scalar == f32 and dst_type.scalar == bf16:
            return TH(down(src.data), bf16)
        return cast_impl(self, src, dst_type)

    IB.binary_op, IB.create_dot, IB.cast_impl = binary_op_bf16, create_dot_bf16, cast_impl_rne


class Rig:
    """The pool tensors SGLang's MambaPool allocates for --enable-linear-replayssm-spec (all layers,
    [layers, slots, ...]), the per-layer weights, inputs and the round's index tensors."""

    def __init__(self, torch, sgl, T, B, layers, ring, device, seed, rounds=4, a_range=(1.0, 16.0),
                 track_interval=0):
        assert ring & (ring - 1) == 0 and ring >= 2 * T, "ring: power of two >= 2T"
        self.torch, self.sgl, self.T, self.B, self.layers, self.ring = torch, sgl, T, B, layers, ring
        self.dev = torch.device(device)
        self.gen = torch.Generator(device=self.dev).manual_seed(seed)
        n_req = B + EXTRA_SLOTS
        n_slots = n_req + (B if track_interval else 0)  # + one ping-pong track slot per row
        bf = torch.bfloat16
        rnd = self.rnd
        # memory_pool.py:722-753 (conv, temporal), 793-817 (d, k, g), 849-862 (rawv, rawk)
        self.temporal = rnd((layers, n_slots, HV, V, K), torch.float32, 0.1)
        self.conv = rnd((layers, n_slots, D, W - 1), bf, 1.0)
        self.d = rnd((layers, n_req, HV, ring, V), bf, 0.1)
        self.k = rnd((layers, n_req, H, ring, K), bf, K ** -0.5)
        self.g = -rnd((layers, n_req, HV, ring), torch.float32, 1.0).abs_().mul_(0.1)
        self.rawv = rnd((layers, n_req, HV, ring, V), bf, 1e-3)
        self.rawk = rnd((layers, n_req, H, ring, K), bf, 1e-4)
        # cursors: zero-initialised by SGLang (memory_pool.py:1039-1053)
        self.write_pos = torch.zeros(n_req, dtype=torch.int32, device=self.dev)
        self.cache_base = torch.zeros(n_req, dtype=torch.int32, device=self.dev)
        self.is_flush = torch.zeros(n_req, dtype=torch.int8, device=self.dev)
        # deduplicated sliding-window conv intermediate (memory_pool.py:598-636, window axis -1)
        phys = rnd((layers, n_req, D, T + W - 2), bf, 1.0)
        self.icw = phys.as_strided((layers, n_req, T, D, W - 1),
                                   (phys.stride(0), phys.stride(1), 1, phys.stride(2), 1))
        # per-layer weights: conv1d weight [D, W] bf16, A_log fp32, dt_bias bf16 (qwen3_next.py)
        self.conv_w = rnd((layers, D, W), bf, 0.5)
        lo, hi = a_range  # A = exp(A_log) uniform in [lo, hi]
        u = torch.rand((layers, HV), generator=self.gen, device=self.dev) * (hi - lo) + lo
        self.A_log = torch.log(u)
        self.dt_bias = rnd((layers, HV), bf, 0.1)
        # inputs: in_proj output (mixed qkv before the conv) and a, b, one set per layer
        self.x = rnd((layers, B * T, D), bf, 1.0)
        self.a = rnd((layers, B * T, HV), bf, 1.0)
        self.b = rnd((layers, B * T, HV), bf, 1.0)
        # rows -> shuffled request slots (int64) and mamba slots (int32)
        cpu = torch.Generator().manual_seed(seed + 1)
        req = torch.randperm(n_req, generator=cpu)[:B]
        perm = torch.randperm(n_slots, generator=cpu)
        slots = perm[:B]
        mapping = torch.full((n_req,), -1, dtype=torch.int32)
        mapping[req] = slots.to(torch.int32)
        self.req_pool_indices = req.to(torch.int64).to(self.dev)
        self.req_to_mamba = mapping.to(self.dev)
        self.slots = slots.tolist()
        self.cache_indices = self.req_to_mamba[self.req_pool_indices]  # forward metadata
        self.query_start_loc = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=self.dev)
        self.inter_idx = torch.arange(B, dtype=torch.int32, device=self.dev)
        # accepted lengths, one device tensor per round of the graph (incl. the bonus token)
        # the lengths our bench draws for the same (T, B) (bench_accepted): both sides replay
        # the same histories
        self.acc_host = [torch.tensor([bench_accepted(T, B, k, r) for r in range(B)])
                         for k in range(rounds)]
        self.acc = [a.to(torch.int32).to(self.dev) for a in self.acc_host]
        self.last_step = [(a - 1).to(torch.int64).to(self.dev) for a in self.acc_host]
        # extra_buffer: per-row track slot (int64) and, per round, the step whose state is
        # snapshot when the accepted prefix crosses a multiple of the track interval, else -1
        # (spec_utils.py:984-1000; fused_commit_track_indices on CUDA)
        self.track_slots, self.track_steps, self.track_host = None, [None] * rounds, []
        if track_interval:
            self.track_slots = perm[B:2 * B].tolist()
            self.track_indices = perm[B:2 * B].to(torch.int64).to(self.dev)
            seq = torch.randint(1, 4096, (B,), generator=cpu)
            for r in range(rounds):
                post = seq + self.acc_host[r]
                cross = seq // track_interval != post // track_interval
                step = torch.where(cross, post // track_interval * track_interval - seq - 1, -1)
                self.track_host.append(step)
                self.track_steps[r] = step.to(torch.int64).to(self.dev)
                seq = post

    def rnd(self, shape, dtype, scale):
        t = self.torch.randn(shape, generator=self.gen, device=self.dev, dtype=self.torch.float32)
        return t.mul_(scale).to(dtype) if dtype != self.torch.float32 else t.mul_(scale)

    def verify_layer(self, l):
        """gdn_backend.py:1041-1060 (conv), 1078-1102 (split), 1441-1527 (ring verify)."""
        torch, sgl, B, T = self.torch, self.sgl, self.B, self.T
        seq_len = B * T
        mixed_qkv = self.x[l]
        x = mixed_qkv.view(B, T, -1).transpose(1, 2)
        y = sgl.conv.causal_conv1d_update(
            x, self.conv[l], self.conv_w[l], None, "silu",
            conv_state_indices=self.cache_indices[:B],
            intermediate_conv_window=self.icw[l],
            intermediate_state_indices=self.inter_idx[:B],
            retrieve_next_token=None, retrieve_next_sibling=None, retrieve_parent_token=None)
        mixed_qkv = y.transpose(1, 2).view(seq_len, -1)
        query, key, value = torch.split(mixed_qkv, [H * K, H * K, HV * V], dim=-1)
        query = query.view(1, seq_len, H, K)
        key = key.view(1, seq_len, H, K)
        value = value.view(1, seq_len, HV, V)
        # _replayssm_target_verify
        n = query.numel() // (H * K)
        q, k, v = query.reshape(n, H, K), key.reshape(n, H, K), value.reshape(n, HV, V)
        a, b = self.a[l].reshape(n, HV), self.b[l].reshape(n, HV)
        d_cache = self.d[l]
        out = q.new_empty(n, HV, V)
        sgl.gdn.gdn_replayssm_spec_decode(
            q=q, k=k, v=v, a=a, b=b, A_log=self.A_log[l], dt_bias=self.dt_bias[l],
            checkpoint_state=self.temporal[l], d_cache=d_cache, k_cache=self.k[l],
            g_cache=self.g[l], rawv_cache=self.rawv[l], rawk_cache=self.rawk[l], beta_cache=None,
            out=out, query_start_loc=self.query_start_loc, ssm_state_indices=self.cache_indices,
            replay_indices=self.req_pool_indices, write_pos=self.write_pos,
            cache_base=self.cache_base, is_flush=self.is_flush, max_cache_len=d_cache.shape[-2],
            max_spec_len=T, scale=K ** -0.5, use_qk_l2norm_in_kernel=True, null_block_id=-1,
            launch_mode="verify")
        return out.reshape(value.shape)

    def commit(self, r, count_folds=False):
        """spec_utils.py:1082-1159 (commit_mamba_states_after_verify, circular GDN branch)."""
        torch, gdn = self.torch, self.sgl.gdn
        accept_lens, last_step, steps_to_track = self.acc[r], self.last_step[r], self.track_steps[r]
        track_indices = self.track_indices if self.track_slots is not None else None
        state_batch_indices = self.req_to_mamba[self.req_pool_indices]
        replay_indices = self.req_pool_indices
        gdn.commit_gdn_replayssm_spec(
            write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush,
            num_accepted=accept_lens, replay_indices=replay_indices,
            max_cache_len=self.d.shape[-2], max_spec_len=self.T,
            fold_every_commit=self.temporal.dtype != torch.float32, null_block_id=-1)
        folds = int((self.is_flush[replay_indices] != 0).sum()) if count_folds else 0
        gdn.commit_gdn_replayssm_circular(
            checkpoint_state=self.temporal, d_cache=self.d, k_cache=self.k, g_cache=self.g,
            d_residual_cache=self.rawv, k_residual_cache=self.rawk,
            state_batch_indices=state_batch_indices, replay_indices=replay_indices,
            write_pos=self.write_pos, cache_base=self.cache_base, is_flush=self.is_flush,
            accept_lens=accept_lens, mamba_track_indices=track_indices,
            mamba_steps_to_track=steps_to_track, null_block_id=-1)
        self.conv_window_scatter(state_batch_indices, last_step)
        if track_indices is not None:
            self.conv_window_scatter(track_indices, steps_to_track)
        return folds

    def conv_window_scatter(self, dst_indices, step_indices):
        sc = self.sgl.scatter
        if self.dev.type == "cuda":
            sc.fused_conv_window_scatter_with_mask(self.conv, self.icw, dst_indices, step_indices,
                                                   None)
            return
        # The wrapper refuses non-CUDA tensors (mamba_state_scatter_triton.py:507); on CPU (the
        # Triton interpreter, --check only) its launch is repeated line for line (:541-567).
        dst, src = self.conv, self.icw
        dst_i = dst_indices.to(self.torch.int32).contiguous()
        step_i = step_indices.to(self.torch.int32).contiguous()
        src_i = sc._prepare_src_rows(None, step_i)
        elem = dst.shape[2] * dst.shape[3]
        grid = (step_i.shape[0], dst.shape[0], -(-elem // 1024))
        sc._fused_conv_window_scatter_with_mask_kernel[grid](
            src, dst, dst_i, step_i, src_i, elem, dst.shape[3], *src.stride(), dst.stride(0),
            dst.stride(1), src.shape[1], src.shape[2], dst.shape[1], BLOCK_SIZE=1024)

    def round(self, r, count_folds=False, outputs=None):
        for l in range(self.layers):
            o = self.verify_layer(l)
            if outputs is not None:
                outputs.append(o.reshape(-1, HV, V).float().clone())
        return self.commit(r, count_folds)


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def bench_shape(torch, sgl, T, B, args, flush):
    rig = Rig(torch, sgl, T, B, args.layers, args.ring, args.device, args.seed + 1000 * T + B,
              track_interval=args.track_interval)
    tracks = sum(int((t >= 0).sum()) for t in rig.track_host)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for r in range(4):  # compile every kernel with the graph's own tensors; cursors mid-ring
            rig.round(r)
        folds = sum(rig.round(r, count_folds=True) for _ in range(4) for r in range(4))
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for r in range(4):
            rig.round(r)
    stream.synchronize()
    times = replay_times(torch, graph, stream, flush, args.reps)
    del graph, rig
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return statistics.median(times) / 4, folds / (16 * B), tracks / (4 * B), times


# --------------------------------------------------------------------------------------------
# Correctness: sequential fp32 reference
# --------------------------------------------------------------------------------------------
def ref_layer(torch, rig, l, x, a, b, conv_st, S):
    """One row, one layer, T tokens: returns (outputs [T, HV, V], states after each token,
    conv windows after each token). Conv as causal_conv1d_update (silu); the gated delta rule as
    fused_sigmoid_gating_delta_rule_update_kernel (fused_sigmoid_gating_recurrent.py:303-489)."""
    T = rig.T
    w = rig.conv_w[l].float()  # [D, W]
    xs = torch.cat([conv_st, x.t()], dim=1)  # [D, W-1+T], oldest first, bf16 values
    conv = []
    for t in range(T):  # as the kernel: bf16 products (bf16 x bf16), fp32 sum in tap order
        acc = torch.zeros_like(w[:, 0])
        for j in range(W):
            acc = acc + (xs[:, t + j] * w[:, j]).to(torch.bfloat16).float()
        conv.append(acc / (1 + torch.exp(-acc)))
    conv = torch.stack(conv).to(torch.bfloat16).float()  # [T, D]; activations are bf16
    q = conv[:, :H * K].view(T, H, K)
    k = conv[:, H * K:2 * H * K].view(T, H, K)
    v = conv[:, 2 * H * K:].view(T, HV, V)
    heads = torch.arange(HV, device=x.device) // (HV // H)
    A = rig.A_log[l].float()
    dtb = rig.dt_bias[l].float()
    outs, states, windows = [], [], []
    for t in range(T):
        xg = a[t] + dtb
        sp = torch.where(xg <= 20.0, torch.log(1.0 + torch.exp(xg)), xg)
        g = -torch.exp(A) * sp
        beta = 1.0 / (1.0 + torch.exp(-b[t]))
        qn = q[t] / torch.sqrt((q[t] * q[t]).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
        kn = k[t] / torch.sqrt((k[t] * k[t]).sum(-1, keepdim=True) + 1e-6)
        qh, kh = qn[heads], kn[heads]  # [HV, K]
        S = S * torch.exp(g)[:, None, None]  # S: [HV, V, K]
        u = beta[:, None] * (v[t] - torch.einsum("hvk,hk->hv", S, kh))
        S = S + u[:, :, None] * kh[:, None, :]
        outs.append(torch.einsum("hvk,hk->hv", S, qh))
        states.append(S)
        windows.append(xs[:, t + 1:t + W].clone())
    return torch.stack(outs), states, windows


def run_check(torch, sgl, device, T, rounds, seed):
    """B=3 rows, 2 layers, fresh inputs every round, track interval 8. Slow decays (A = exp(A_log)
    in [0.02, 1]) so that the ring history and the folds weigh on the outputs (with the bench's
    A in [1, 16] most history is decayed away). Returns the max over tokens of max|o - ref| /
    max|ref| over the token's HV x V outputs, and over track snapshots of the same for states."""
    B, layers = 3, 2
    rig = Rig(torch, sgl, T, B, layers, 16, device, seed, rounds=rounds, a_range=(0.02, 1.0),
              track_interval=8)
    ref_S = [[rig.temporal[l, s].float().clone() for s in rig.slots] for l in range(layers)]
    ref_c = [[rig.conv[l, s].float().clone() for s in rig.slots] for l in range(layers)]
    worst_tok, worst_row, worst_track, folds, hist, tracks = 0.0, 0.0, 0.0, 0, 0, 0
    for r in range(rounds):
        for t in (rig.x, rig.a, rig.b):  # fresh inputs every round
            t.copy_(rig.rnd(t.shape, t.dtype, 1.0))
        hist += int((rig.write_pos[rig.req_pool_indices] > 0).sum())
        outs = []
        folds += rig.round(r, count_folds=True, outputs=outs)
        acc, track = rig.acc_host[r].tolist(), rig.track_host[r].tolist()
        for l in range(layers):
            got = outs[l].view(B, T, HV, V)
            for n in range(B):
                sl = slice(n * T, (n + 1) * T)
                ref, states, wins = ref_layer(torch, rig, l, rig.x[l, sl].float(),
                                              rig.a[l, sl].float(), rig.b[l, sl].float(),
                                              ref_c[l][n], ref_S[l][n])
                diff = (got[n] - ref).abs().nan_to_num(nan=float("inf"))  # NaN fails
                tok = diff.flatten(1).amax(1) / ref.abs().flatten(1).amax(1)
                worst_tok = max(worst_tok, float(tok.max()))
                worst_row = max(worst_row, float(diff.max() / ref.abs().max()))
                if track[n] >= 0:  # the snapshot in the row's track slot, state and conv window
                    tracks += 1
                    slot, ref_t = rig.track_slots[n], states[track[n]]
                    d = (rig.temporal[l, slot] - ref_t).abs().nan_to_num(nan=float("inf"))
                    worst_track = max(worst_track, float(d.max() / ref_t.abs().max()))
                    if not torch.equal(rig.conv[l, slot].float(), wins[track[n]]):
                        worst_track = float("inf")
                ref_S[l][n] = states[acc[n] - 1]
                ref_c[l][n] = wins[acc[n] - 1]
    print(f"check T={T} B={B} layers={layers} rounds={rounds} accepted="
          f"{[a.tolist() for a in rig.acc_host]}: {hist} row-rounds verified over ring history, "
          f"{folds} folds, {tracks // layers} track snapshots; max rel err {worst_tok:.3e} per "
          f"token ({worst_row:.3e} per row), track states {worst_track:.3e}", flush=True)
    return max(worst_tok, worst_track)


# --------------------------------------------------------------------------------------------
def positive_list(text):
    """--T / --B: comma-separated positive integers (argparse names the option on an error)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return values


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def main():
    p = argparse.ArgumentParser(description="SGLang 0.5.23 GDN ReplaySSM ring verify rounds "
                                "(see the module docstring)")
    p.add_argument("--T", type=positive_list, default=[2, 4, 8],
                   help="draft window lengths (tokens verified per row), e.g. 2,4,8")
    p.add_argument("--B", type=positive_list, default=[1, 8, 32, 128], help="rows, e.g. 1,8")
    p.add_argument("--reps", type=positive, default=20)
    p.add_argument("--ring", type=positive, default=16,
                   help="linear_replayssm_cache_len: a power of two >= 2 x the largest T")
    p.add_argument("--layers", type=positive, default=36)
    p.add_argument("--track-interval", type=int, default=0,
                   help="mamba_track_interval of the extra_buffer radix strategy (SGLang's server "
                        "default: 256); 0 = no_buffer, the round specstate's bench times")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--check", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--sglang-src", default=".whl/sglang-0.5.23-src")
    args = p.parse_args()
    if args.track_interval < 0:
        p.error(f"argument --track-interval: {args.track_interval} must be >= 0")
    if args.ring & (args.ring - 1) or args.ring < 2 * max(args.T):
        p.error(f"argument --ring: {args.ring} must be a power of two >= 2 x the largest --T "
                f"({max(args.T)}), as SGLang requires")
    if args.check and (args.T != [2, 4, 8] or args.B != [1, 8, 32, 128]):
        p.error("--check runs its own shapes (T = 4 and 8, B = 3, 2 layers): drop --T / --B")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import torch
    import triton

    if args.device.startswith("cuda"):
        if torch.device(args.device).index is not None:
            torch.cuda.set_device(torch.device(args.device))
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        patch_interpreter_bf16()
    sgl = load_sglang(torch, args.sglang_src, args.device)
    if args.check:
        bad = False
        for T, rounds in ((4, 6), (8, 3)):
            bad |= not run_check(torch, sgl, args.device, T, rounds, args.seed) < 2e-2
        print("check " + ("FAILED" if bad else "passed") + f" (tf32={sgl.tf32}, pdl={sgl.pdl}, "
              f"interpreter={os.environ.get('TRITON_INTERPRET', '0')})")
        sys.exit(1 if bad else 0)
    if not args.device.startswith("cuda"):
        sys.exit("timing needs CUDA (graphs, events); use --check on CPU")
    Ts, Bs = args.T, args.B
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=args.device)
    results = []

    def write_json():  # after every shape: a later shape's failure keeps the earlier ones
        if not args.json:
            return
        props = torch.cuda.get_device_properties(torch.device(args.device))
        doc = {
            "what": f"SGLang ReplaySSM circular ring, GDN verify round: {args.layers} x (conv + "
                    "ring verify), then cursor advance + capacity materialisation (+ track "
                    "snapshots) + conv-window commit",
            "env": {"gpu": props.name, "capability": list(torch.cuda.get_device_capability()),
                    "torch": torch.__version__, "cuda": torch.version.cuda,
                    "triton": triton.__version__, "sglang": SGLANG_VERSION,
                    "tf32": sgl.tf32, "pdl": sgl.pdl},
            "shapes": {"H": H, "HV": HV, "K": K, "V": V, "conv_width": W, "conv_dim": D,
                       "layers": args.layers, "ring": args.ring, "slots": f"B+{EXTRA_SLOTS}",
                       "track_interval": args.track_interval,
                       "state": "fp32 [slots, HV, V, K]", "activations": "bf16"},
            "method": {"rounds_per_graph": 4, "reps": args.reps, "warmup_replays": 3,
                       "l2_flush_bytes": FLUSH_BYTES, "stat": "median replay / 4",
                       "seed": args.seed},
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)

    print("T B round_us fold_rate", flush=True)
    for T in Ts:
        for B in Bs:
            us, fold_rate, track_rate, times = bench_shape(torch, sgl, T, B, args, flush)
            print(f"{T} {B} {us:.1f} {fold_rate:.3f}", flush=True)
            results.append({"T": T, "B": B, "round_us": us, "fold_rate": fold_rate,
                            "track_rate": track_rate, "graph_replay_us": times})  # 4 rounds each
            write_json()


if __name__ == "__main__":
    main()
