"""The GPU sessions' analysis tools that run without a GPU: scripts/ncu_source.py's reading of
ncu's source page (the per-line report and the kernel's parts by execution count),
scripts/bench_json.py's table against SGLang's ring (issue 16's ratios, with our bytes), and
tools/graph_timing.py's kernel table (tools/kda_bench.py --profile)."""

import csv
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_ncu_source():
    spec = importlib.util.spec_from_file_location("ncu_source", ROOT / "scripts" / "ncu_source.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HEADER = ["Line No", "Source", "Address", "Source", "Warp Stall Sampling (All Samples)",
          "Instructions Executed"]


def write_page(path, files):
    """files: {file: [(line, text, samples, instructions, [(address, sass, n), ...])]}."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        for name, lines in files.items():
            w.writerow(["File Path", f"/src/{name}"])
            w.writerow(["Function Name", "kernel"])
            w.writerow(HEADER)
            for line, text, samples, inst, sass in lines:
                w.writerow([str(line), text, "-", "-", str(samples), f"{inst:,}"])
                for address, op, n in sass:
                    w.writerow(["", "", address, op, "0", str(n)])


def test_lines_and_parts_count_an_inlined_instruction_once(tmp_path, capsys):
    tool = load_ncu_source()
    page = tmp_path / "source.csv"
    # A prologue instruction run 16 times; a loop body of two instructions run 64 times, one of
    # them inlined from a header and so listed under both files' lines.
    write_page(page, {
        "kernel.cuh": [(10, "setup();", 5, 16, [("0x10", "MOV", 16)]),
                       (20, "s = fmaf(a, b, s);", 30, 1280, [("0x20", "FFMA", 64),
                                                             ("0x30", "LDS", 64)])],
        "common.cuh": [(7, "return *p;", 2, 64, [("0x30", "LDS", 64)])],
    })
    lines, sass = tool.parse(str(page))
    assert lines[("kernel.cuh", "20")][:2] == [1280.0, 30.0]
    assert lines[("common.cuh", "7")][2] == "return *p;"
    assert len(sass) == 3  # 0x30 once, though listed under two lines
    assert sass["0x30"][1] == {"kernel.cuh:20", "common.cuh:7"}
    tool.parts(sass)
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if " x " in r]
    # The loop body (2 instructions x 64 = 128 of 144) first, then the prologue (16).
    assert rows[0].split()[:3] == ["64", "x", "2"] and "88.9%" in rows[0]
    assert rows[1].split()[:3] == ["16", "x", "1"] and "11.1%" in rows[1]
    tool.per_line(lines)
    out = capsys.readouterr().out
    assert out.splitlines()[1].endswith("kernel.cuh:20  s = fmaf(a, b, s);")


def load_bench_json():
    spec = importlib.util.spec_from_file_location("bench_json", ROOT / "scripts" / "bench_json.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_bench(path, rows):
    """A benchmark's JSON as the specstate benches write it (with the probe line and the summary
    table after the object): rows of (T, B, us, MB, frac_copy_bw)."""
    bms = [{"name": f"BM_Rounds4Replay/T:{T}/B:{B}/min_time:0.050/manual_time", "us": us,
            "MB": mb, "frac_copy_bw": frac} for T, B, us, mb, frac in rows]
    bms.append({"name": "BM_Rounds4Replay/T:2/B:1/min_time:0.050/manual_time", "us": 1.0,
                "error_occurred": True})  # flagged: left out
    text = "copy bandwidth 3041 GB/s\n" + json.dumps({"context": {}, "benchmarks": bms})
    path.write_text(text + "\n\nthis run: a summary table the benches print after the JSON\n")


def test_ring_table_has_the_mean_runs_bytes_bandwidth_floor_ratio_target_and_spread(tmp_path,
                                                                                     capsys):
    """The ratio to SGLang is the mean of our runs (the lower of two favoured us: T = 4, B = 8
    read 0.7003 and 'met' at a 0.70 target that its own rule fails), with the spread beside it;
    a run of ours with other layers than SGLang's is named."""
    tool = load_bench_json()
    ours, again, theirs = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "s.json"
    write_bench(ours, [(4, 128, 6680.9, 16402.6, 0.808), (4, 8, 635.0, 1027.4, 0.532)])
    write_bench(again, [(4, 128, 6653.5, 16402.6, 0.811), (4, 8, 640.0, 1027.4, 0.528)])
    theirs.write_text(json.dumps({
        "env": {"sglang": "0.5.23", "gpu": "H100"},
        "shapes": {"ring": 16, "layers": 36, "track_interval": 0},
        "results": [{"T": 4, "B": 128, "round_us": 9752.9, "fold_rate": 0.25},
                    {"T": 4, "B": 8, "round_us": 933.9, "fold_rate": 0.26},
                    {"T": 2, "B": 1, "round_us": 514.3, "fold_rate": 0.12}]}))
    tool.ring([str(ours), str(again)], str(theirs))
    rows = {tuple(r.split()[:2]): r for r in capsys.readouterr().out.splitlines()[2:]}
    # The mean (6667.2) gives the ratio, and the bytes over it: 16403 MB at 81.0%, 1.24x.
    assert "6680.9" in rows[("4", "128")] and "16403 81.0%" in rows[("4", "128")]
    assert "1.24" in rows[("4", "128")] and "0.684" in rows[("4", "128")]
    assert "0.65 MISS (spread 0.4%)" in rows[("4", "128")]
    assert "0.683" in rows[("4", "8")] and "0.70 met (spread 0.8%)" in rows[("4", "8")]
    assert ("2", "1") not in rows  # only a flagged run of ours: no row
    # A mean of 0.7003 against 0.70 misses, though the lower run (0.6992) would have met it.
    write_bench(ours, [(4, 8, 653.0, 1027.4, 0.53)])
    write_bench(again, [(4, 8, 655.0, 1027.4, 0.53)])
    tool.ring([str(ours), str(again)], str(theirs))
    out = capsys.readouterr().out
    assert "0.700" in out and "0.70 MISS" in out
    # Our layers against SGLang's.
    text = json.loads(ours.read_text().split("\n", 1)[1].split("\n\n")[0])
    for bm in text["benchmarks"]:
        bm["layers"] = 24
    ours.write_text("copy bandwidth 3041 GB/s\n" + json.dumps(text) + "\n")
    tool.ring([str(ours)], str(theirs))
    assert "our run has [24] layers, SGLang's 36" in capsys.readouterr().out


def load_graph_timing():
    path = ROOT / "tools" / "graph_timing.py"
    spec = importlib.util.spec_from_file_location("graph_timing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kernel_table_is_per_round_largest_first_with_the_rest_and_the_sum():
    tool = load_graph_timing()
    # 5 replays of a graph of 4 rounds: 20 rounds.
    kernels = [dict(name="conv_update_kernel<bf16>", us=2000.0, launches=400),
               dict(name="gdn_recurrence_kernel<bf16, float, true>", us=6000.0, launches=400),
               dict(name="commit_pending_kernel", us=400.0, launches=20),
               dict(name="begin_round_kernel", us=100.0, launches=20)]
    lines = tool.kernel_table(kernels, reps=5, top=2, width=21)
    assert lines[0].split() == ["share", "us/round", "launches/round", "kernel"]
    first, second = lines[1].split(), lines[2].split()
    assert first[:3] == ["70.6%", "300.0", "20.0"] and first[3] == "gdn_recurrence_kernel"
    assert second[:4] == ["23.5%", "100.0", "20.0", "conv_update_kernel<bf"]
    assert lines[3].split()[:3] == ["5.9%", "25.0", "2.0"] and "(2 more kernels)" in lines[3]
    assert lines[4].split()[:3] == ["100.0%", "425.0", "42.0"] and "summed" in lines[4]
    assert len(lines) == 5
    # No kernel time (a profiler that recorded nothing) is an error naming what it got.
    for bad in ([], [dict(name="k", us=0.0, launches=1)]):
        message = rf"no kernel time \(reps=5, rounds=4, {len(bad)} kernels"
        with pytest.raises(ValueError, match=message):
            tool.kernel_table(bad, reps=5)


def test_the_tools_draw_the_accepted_lengths_of_the_cpp_benches():
    """tools/graph_timing.py's bench_accepted is tests/bench/bench_util.h's formula (the values
    below are the C++ function's, compiled with g++): the SGLang and fla tools replay the same
    accepted lengths as our benches, where each side's own generator drew different ones."""
    spec = importlib.util.spec_from_file_location("graph_timing", ROOT / "tools" / "graph_timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    draw = module.bench_accepted
    assert [draw(4, 1, k, 0) for k in range(4)] == [1, 3, 1, 1]
    assert [draw(8, 8, 0, r) for r in range(8)] == [1, 7, 5, 6, 8, 8, 2, 4]
    assert draw(2, 128, 3, 127) == 2
    for T in (2, 4, 8):
        values = [draw(T, 128, k, r) for k in range(4) for r in range(128)]
        assert min(values) == 1 and max(values) == T
        assert abs(sum(values) / len(values) - (T + 1) / 2) < 0.25
