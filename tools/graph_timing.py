"""CUDA-graph timing shared by the benchmark tools (tools/kda_bench.py,
tools/sglang_ring_bench.py): the same method as the C++ benches' GraphTimer."""

WARMUP_REPLAYS = 3


def bench_accepted(T, B, k, r):
    """Row r's accepted length in round k of a (T, B) benchmark, in [1, T]: splitmix64 of
    (1000 T + B, k, r), as tests/bench/bench_util.h's bench_accepted draws it for our rounds."""
    m = (1 << 64) - 1
    x = (((1000 * T + B) << 32) ^ (k << 20) ^ r) & m
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    x ^= x >> 31
    return 1 + x % T


def replay_times(torch, graph, stream, flush, reps):
    """Microseconds of each of `reps` replays of `graph` on `stream`, each after an L2 flush
    (`flush.zero_()`, outside the timed events), after WARMUP_REPLAYS untimed ones."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps + WARMUP_REPLAYS):
        with torch.cuda.stream(stream):
            flush.zero_()
            e0.record(stream)
            graph.replay()
            e1.record(stream)
        e1.synchronize()
        if i >= WARMUP_REPLAYS:
            times.append(e0.elapsed_time(e1) * 1000.0)
    return times


def kernel_profile(torch, graph, stream, flush, reps):
    """The kernels of `reps` replays of `graph` (each after an L2 flush, whose own kernel is left
    out), by torch's profiler (CUPTI, so the device machine needs no Nsight Systems): a list of
    dicts {name, us, launches}, summed over the replays. Kernels are timed one by one as the
    graph runs them, so their sum may exceed the replay's time where kernels overlap
    (programmatic dependent launch)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.cuda.stream(stream):  # warm: the profiler's first replay would pay for setup
        graph.replay()
    stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            with torch.cuda.stream(stream):
                flush.zero_()
                graph.replay()
        stream.synchronize()
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:  # torch < 2.4
            us = e.self_cuda_time_total
        if us > 0 and "FillFunctor" not in e.key:  # flush.zero_()
            kernels.append(dict(name=e.key, us=float(us), launches=int(e.count)))
    return kernels


def kernel_table(kernels, reps, rounds=4, top=10, width=100):
    """Lines of a per-round kernel breakdown of kernel_profile's result over `reps` replays of a
    graph of `rounds` rounds: each kernel's share of the summed kernel time, microseconds and
    launches a round, largest first; then the rest and the sum."""
    per = reps * rounds
    total = sum(k["us"] for k in kernels)
    if per <= 0 or total <= 0:
        raise ValueError(f"kernel_table: no kernel time (reps={reps}, rounds={rounds}, "
                         f"{len(kernels)} kernels)")
    ranked = sorted(kernels, key=lambda k: -k["us"])
    lines = ["  share  us/round  launches/round  kernel"]
    for k in ranked[:top]:
        lines.append(f"{100 * k['us'] / total:6.1f}% {k['us'] / per:9.1f} "
                     f"{k['launches'] / per:15.1f}  {k['name'][:width]}")
    rest = ranked[top:]
    if rest:
        us = sum(k["us"] for k in rest)
        lines.append(f"{100 * us / total:6.1f}% {us / per:9.1f} "
                     f"{sum(k['launches'] for k in rest) / per:15.1f}  ({len(rest)} more kernels)")
    lines.append(f"{100.0:6.1f}% {total / per:9.1f} "
                 f"{sum(k['launches'] for k in kernels) / per:15.1f}  (all kernels, summed)")
    return lines
