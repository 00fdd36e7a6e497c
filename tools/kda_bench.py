#!/usr/bin/env python3
"""KDA verify rounds on a GPU: specstate (snapshot and replay) against fla's verify path, measured in
one process (issue 18.4).

    python3 tools/kda_bench.py                        # T = 2, 4, 8; B = 1, 8, 32, 128
    python3 tools/kda_bench.py --T 4 --B 8 --json out.json
    python3 tools/kda_bench.py --layout vllm          # both sides in vLLM's order before #33291
    python3 tools/kda_bench.py --T 4 --replay-only --ring 12   # one point of a ring sweep
    python3 tools/kda_bench.py --T 2 --B 8 --replay-only --profile   # the round's kernels

Shapes: Kimi-Linear-48B-A3B at TP1 (20 KDA layers; H = HV = 32, K = V = 128, W = 4; bf16
activations and conv state, fp32 SSM state [HV][V][K]: 2 MiB per row and layer). A round is what
an engine runs per verify: every layer's conv + recurrence over B rows of T draft tokens, then the
commit of a different accepted length per row (1..T, drawn once). Each measurement is a CUDA graph
of 4 consecutive rounds (so deferred work, replay's folds, is counted), replayed after a 256 MiB
L2 flush, median of --reps replays, divided by 4. Inputs and states are random (never zeros).

specstate: one StatePool per (strategy, T) with 128 slots, B rows shuffled over them; per round
begin_verify, verify of the 20 layers, commit from device memory (all inside the graph).

fla (fla-core, Triton): its verify path as vLLM's KDA backend drives it, per layer
  - the conv: fla.modules.causal_conv1d.causal_conv1d_update, one call per draft token over the
    B rows (fla's conv has no multi-token mode);
  - the recurrence: fla.ops.kda.fused_recurrent_kda_fwd with 2-D ssm_state_indices [B, T] (the
    state after every token written to its own slot: snapshot-like) and num_accepted_tokens (the
    start state read from the previous round's accepted slot, so its commit costs nothing);
    gate, q/k l2norm and beta sigmoid in the kernel, state_v_first=True (specstate's layout).
  q, k, v, g, beta are given to it as contiguous tensors (the split of the conv output is not
  timed: an engine's conv writes them where the recurrence reads them).
"fla rec" is the recurrence alone (20 launches), "fla" the conv calls plus the recurrence.

--layout vllm: the states in the order vLLM's KDA backend allocated before its PR #33291 (today's
vLLM keeps [HV][V][K], the default order here): specstate's pools with
PoolOptions(conv_layout=CHANNELS_LAST, ssm_layout=KV) ([W-1][conv_dim] windows, [HV][K][V]
states), fla's recurrence with state_v_first=False ([B*T, HV, K, V] state slots). fla's conv
cache stays [B, D, W] (its causal_conv1d_update's own layout).

Prints a table and, with --json, writes the numbers (microseconds per round).
"""

import argparse
import json
import statistics
import sys

from graph_timing import (bench_accepted, kernel_profile, kernel_table,  # tools/ (the script's folder)
                          replay_times)

L, H, HV, K, V, W = 20, 32, 32, 128, 128, 4
D = 2 * H * K + HV * V  # 12288


def _up16(n):
    return (n + 15) // 16 * 16


# A KDA factor record of one token (kernels/kernel_types.h kda_factor_layout, bf16 keys):
# u (HV x V f32), e^g (HV x K f32), kf (H f32), k (H x K bf16), each 16-byte aligned.
RECORD_BYTES = _up16(_up16(_up16(4 * HV * V) + 4 * HV * K) + 4 * H) + _up16(2 * H * K)


def replay_floor_us(specstate, T, B, bw, ring=0, fold_rows=0):
    """DESIGN.md section 8's floor of a replay round, us: per row and layer the checkpoint read,
    written at the fold rate f, the conv window read and written and the factor records (h read,
    T written), f and h the ring model's under uniform acceptance in [1, T]."""
    kda = specstate.LayerKind.KDA
    R = ring or specstate.default_replay_ring(kda, T)
    if R < 2 * T:
        return 0.0
    m = specstate.replay_ring_model(T, R, B, fold_rows or specstate.default_replay_fold_rows(kda))
    state = HV * V * K * 4
    conv_window = D * (W - 1) * 2
    per_row = state * (1 + m.fold_rate) + 2 * conv_window + (m.mean_history + T) * RECORD_BYTES
    return L * B * per_row / (bw * 1e9) * 1e6
MAX_B = 128
FLUSH_BYTES = 256 << 20


def time_graph(torch, graph, stream, flush, reps):
    """Median microseconds of one replay of `graph` on `stream`, each after an L2 flush."""
    return statistics.median(replay_times(torch, graph, stream, flush, reps))


def copy_gbps(torch):
    """The device-to-device copy bandwidth (GB/s, read + write counted) of a 1 GiB copy."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1000.0)
    return 2 * a.numel() / statistics.median(times) / 1e9


def capture(torch, stream, body):
    """A CUDA graph of body() captured on `stream` (after one eager run for the warm-up)."""
    with torch.cuda.stream(stream):
        body()
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        body()
    stream.synchronize()
    return g


def bench_specstate(torch, specstate, strategy, T, Bs, reps, flush, gen, layout, ring=0,
                    fold_rows=0, layers=L, profile=False):
    s = torch.cuda.Stream()
    cfg = specstate.KdaConfig()  # Kimi-Linear-48B-A3B TP1 (the defaults)
    assert (cfg.num_k_heads, cfg.num_v_heads, cfg.head_k_dim, cfg.head_v_dim) == (H, HV, K, V)
    pool = specstate.StatePool(
        specstate.ModelConfig.kda(layers, cfg),
        specstate.PoolOptions(num_slots=MAX_B, max_rows=MAX_B, max_window=T,
                              backend=specstate.Backend.CUDA, strategy=strategy,
                              stream=s.cuda_stream, replay_ring=ring, replay_fold_rows=fold_rows,
                              **layout_options(specstate, layout)))
    handles = [pool.acquire() for _ in range(MAX_B)]
    dev = dict(device="cuda")
    bf16, f32 = torch.bfloat16, torch.float32
    for l in range(layers):
        torch.from_dlpack(pool.ssm_state(l)).normal_(0.0, 0.5, generator=gen)
        torch.from_dlpack(pool.conv_state(l)).normal_(0.0, 1.0, generator=gen)
    n = MAX_B * T
    w = [specstate.KdaWeights(
        conv_weight=(0.5 * torch.randn(D, W, generator=gen, **dev)).to(bf16),
        A_log=torch.rand(HV, generator=gen, **dev) * 2.0,
        dt_bias=torch.randn(HV, K, generator=gen, **dev) * 0.5) for _ in range(L)]
    x = [torch.randn(n, D, generator=gen, **dev).to(bf16) for _ in range(L)]
    g = [torch.randn(n, HV, K, generator=gen, **dev).to(bf16) for _ in range(L)]
    b = [torch.randn(n, HV, generator=gen, **dev).to(bf16) for _ in range(L)]
    conv_out = [torch.empty(n, D, dtype=bf16, **dev) for _ in range(L)]
    core_out = [torch.empty(n, HV, V, dtype=bf16, **dev) for _ in range(L)]
    torch.cuda.synchronize()
    out = {}
    for B in Bs:
        order = torch.randperm(MAX_B, generator=torch.Generator().manual_seed(1000 * T + B))
        batch = specstate.VerifyBatch([handles[i] for i in order[:B].tolist()], window=T)
        # the lengths the C++ benches and the SGLang tool draw for (T, B) (bench_accepted)
        acc = torch.tensor([[bench_accepted(T, B, k, r) for r in range(B)] for k in range(4)],
                           dtype=torch.int32).cuda()
        ins = [specstate.KdaInputs(x[l][:B * T], g[l][:B * T], b[l][:B * T]) for l in range(L)]
        outs = [specstate.KdaOutputs(conv_out=conv_out[l][:B * T], core_out=core_out[l][:B * T])
                for l in range(L)]
        torch.cuda.synchronize()

        def rounds():
            for k in range(4):
                pool.begin_verify(batch)
                for l in range(layers):
                    pool.verify(l, w[l], ins[l], outs[l])
                pool.commit(acc[k])

        graph = capture(torch, s, rounds)
        out[B] = time_graph(torch, graph, s, flush, reps) / 4
        if profile:
            print(f"T={T} B={B:3d} {strategy.name.lower()}: {out[B]:.1f} us a round; its kernels "
                  f"(torch's profiler, {reps} replays of 4 rounds):")
            for line in kernel_table(kernel_profile(torch, graph, s, flush, reps), reps):
                print("  " + line)
        assert pool.last_commit_status() == specstate.Status.SUCCESS
        assert bool(core_out[0][:B * T].float().abs().sum() > 0), "all-zero outputs"
        del graph
    del pool
    torch.cuda.synchronize()
    return out


def layout_options(specstate, layout):
    """PoolOptions keywords of a --layout."""
    if layout == "vllm":
        return dict(conv_layout=specstate.ConvLayout.CHANNELS_LAST,
                    ssm_layout=specstate.SsmLayout.KV)
    return {}


def bench_fla(torch, T, B, reps, flush, gen, layout):
    from fla.modules.causal_conv1d import causal_conv1d_update
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    s = torch.cuda.Stream()
    dev = dict(device="cuda")
    bf16, f32 = torch.bfloat16, torch.float32
    layers = []
    for _ in range(L):
        layers.append(dict(
            weight=(0.5 * torch.randn(D, W, generator=gen, **dev)).to(bf16),
            cache=torch.randn(B, D, W, generator=gen, **dev).to(bf16),
            x=torch.randn(T, B, D, generator=gen, **dev).to(bf16),
            q=torch.randn(B, T, H, K, generator=gen, **dev).to(bf16),
            k=torch.randn(B, T, H, K, generator=gen, **dev).to(bf16),
            v=torch.randn(B, T, HV, V, generator=gen, **dev).to(bf16),
            g=torch.randn(B, T, HV, K, generator=gen, **dev).to(bf16),
            beta=torch.randn(B, T, HV, generator=gen, **dev).to(bf16),
            A_log=torch.rand(HV, generator=gen, **dev) * 2.0,
            dt_bias=torch.randn(HV, K, generator=gen, **dev) * 0.5,
            # T state slots per row (the state after every draft token), [B * T, HV, V, K]
            # ([B * T, HV, K, V] in vLLM's order; K = V here)
            state=torch.randn(B * T, HV, V, K, generator=gen, **dev) * 0.5,
            o=torch.empty(B, T, HV, V, dtype=bf16, **dev)))
    indices = torch.arange(B * T, dtype=torch.int32, **dev).view(B, T)
    accepted = [torch.tensor([bench_accepted(T, B, k, r) for r in range(B)],
                             dtype=torch.int32).cuda() for k in range(4)]
    torch.cuda.synchronize()

    def recurrence(ly, k):
        fused_recurrent_kda_fwd(
            q=ly["q"], k=ly["k"], v=ly["v"], g=ly["g"], beta=ly["beta"], A_log=ly["A_log"],
            dt_bias=ly["dt_bias"], initial_state=ly["state"], scale=K ** -0.5,
            inplace_final_state=True, state_v_first=layout != "vllm", ssm_state_indices=indices,
            num_accepted_tokens=accepted[k], use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, out=ly["o"])

    def rounds_full():
        for k in range(4):
            for ly in layers:
                for t in range(T):
                    causal_conv1d_update(ly["x"][t], ly["cache"], weight=ly["weight"],
                                         activation="silu")
                recurrence(ly, k)

    def rounds_rec():
        for k in range(4):
            for ly in layers:
                recurrence(ly, k)

    res = {}
    for name, body in (("fla", rounds_full), ("fla_rec", rounds_rec)):
        graph = capture(torch, s, body)
        res[name] = time_graph(torch, graph, s, flush, reps) / 4
        del graph
    assert bool(layers[0]["o"].float().abs().sum() > 0), "all-zero outputs"
    del layers
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return res


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--T", default="2,4,8")
    parser.add_argument("--B", default="1,8,32,128")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--layout", choices=("default", "vllm"), default="default",
                        help="state element order of both sides (vllm: channels-last conv "
                             "windows and [HV][K][V] states, fla's state_v_first=False: "
                             "vLLM's before its PR #33291)")
    parser.add_argument("--ring", type=int, default=0,
                        help="PoolOptions.replay_ring of the replay pools (0: the default)")
    parser.add_argument("--fold-rows", type=int, default=0,
                        help="PoolOptions.replay_fold_rows of the replay pools (0: the default)")
    parser.add_argument("--replay-only", action="store_true",
                        help="time only specstate's replay rounds (a ring sweep: run once per "
                             "--ring; snapshot, fla and their ratios are skipped)")
    parser.add_argument("--profile", action="store_true",
                        help="with --replay-only: after each timing, the round's kernels by "
                             "torch's profiler (share, us and launches a round)")
    parser.add_argument("--layers", type=int, default=L,
                        help="with --replay-only: the model's KDA layers (1..20; a round's fixed "
                             "cost is the intercept of rounds against layers)")
    args = parser.parse_args()
    if not 1 <= args.layers <= L or (args.layers != L and not args.replay_only):
        sys.exit(f"--layers {args.layers}: 1..{L}, and only with --replay-only")
    if args.profile and not args.replay_only:
        sys.exit("--profile: only with --replay-only")
    try:
        import torch
        import specstate
        if not args.replay_only:
            import fla  # noqa: F401 (fla-core)
    except ImportError as e:
        sys.exit(f"kda_bench.py needs torch, specstate (CUDA build) and fla-core: {e}")
    if not torch.cuda.is_available():
        sys.exit("kda_bench.py needs a CUDA GPU")
    Ts = [int(t) for t in args.T.split(",")]
    Bs = [int(b) for b in args.B.split(",")]
    gen = torch.Generator(device="cuda").manual_seed(20261202)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    bw = copy_gbps(torch)
    print(f"copy bandwidth {bw:.0f} GB/s")
    rows = []
    for T in Ts:
        if args.replay_only:
            rep = bench_specstate(torch, specstate, specstate.Strategy.REPLAY, T, Bs, args.reps,
                                  flush, gen, args.layout, args.ring, args.fold_rows, args.layers,
                                  args.profile)
            for B in Bs:
                rows.append(dict(T=T, B=B, replay=rep[B], ring=args.ring, layers=args.layers))
                ring = args.ring or "default"
                print(f"T={T} B={B:3d}  replay {rep[B]:9.1f}  (replay_ring {ring}, "
                      f"{args.layers} layers)", flush=True)
            continue
        ours = {s: bench_specstate(torch, specstate, st, T, Bs, args.reps, flush, gen, args.layout,
                                   args.ring, args.fold_rows)
                for s, st in (("snapshot", specstate.Strategy.SNAPSHOT),
                              ("replay", specstate.Strategy.REPLAY))}
        for B in Bs:
            f = bench_fla(torch, T, B, args.reps, flush, gen, args.layout)
            # The floor: one read of every row's state per layer (2 MiB) at the copy bandwidth;
            # rfloor: DESIGN.md section 8's replay floor (replay_floor_us).
            floor = L * B * HV * V * K * 4 / (bw * 1e9) * 1e6
            rows.append(dict(T=T, B=B, snapshot=ours["snapshot"][B], replay=ours["replay"][B],
                             fla=f["fla"], fla_rec=f["fla_rec"], floor=floor,
                             rfloor=replay_floor_us(specstate, T, B, bw, args.ring,
                                                    args.fold_rows)))
            r = rows[-1]
            print(f"T={T} B={B:3d}  snapshot {r['snapshot']:9.1f}  replay {r['replay']:9.1f}  "
                  f"fla {r['fla']:9.1f}  fla rec {r['fla_rec']:9.1f}  replay/fla "
                  f"{r['replay'] / r['fla']:.2f}  replay/fla rec {r['replay'] / r['fla_rec']:.2f}",
                  flush=True)
    if args.replay_only:
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"shape": "kimi-linear-48b-a3b tp1, 20 KDA layers", "copy_gbps": bw,
                           "layout": args.layout, "ring": args.ring, "rows": rows}, fh, indent=1)
        return
    print(f"\nKDA rounds, Kimi-Linear-48B TP1 (20 layers; graph of 4 rounds, median / 4, us; "
          f"state layout: {args.layout})")
    print("floor = 20 layers x B x one read of the 2 MiB state at the copy bandwidth; rfloor = "
          "DESIGN.md section 8's replay floor (checkpoint read, fold writes at the ring model's "
          "rate, factor records, conv window); rep/rf = replay / rfloor")
    print(" T    B |  snapshot    replay |       fla   fla rec | rep/fla rep/rec snap/fla |"
          "    floor rep/flr |   rfloor rep/rf")
    for r in rows:
        print(f"{r['T']:2d} {r['B']:4d} | {r['snapshot']:9.1f} {r['replay']:9.1f} | "
              f"{r['fla']:9.1f} {r['fla_rec']:9.1f} | {r['replay'] / r['fla']:7.2f} "
              f"{r['replay'] / r['fla_rec']:7.2f} {r['snapshot'] / r['fla']:8.2f} | "
              f"{r['floor']:8.1f} {r['replay'] / r['floor']:7.2f} | "
              f"{r['rfloor']:8.1f} {r['replay'] / r['rfloor'] if r['rfloor'] else 0:6.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"shape": "kimi-linear-48b-a3b tp1, 20 KDA layers", "copy_gbps": bw,
                       "layout": args.layout, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
