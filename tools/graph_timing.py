"""CUDA-graph timing shared by the benchmark tools (tools/kda_bench.py,
tools/sglang_ring_bench.py): the same method as the C++ benches' GraphTimer."""

WARMUP_REPLAYS = 3


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
