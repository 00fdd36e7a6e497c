"""The GPU sessions' analysis tools that run without a GPU: scripts/ncu_source.py's reading of
ncu's source page (the per-line report and the kernel's parts by execution count)."""

import csv
import importlib.util
import pathlib

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
