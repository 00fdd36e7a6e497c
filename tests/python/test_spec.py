"""The spec/ helpers (windows, greedy acceptance, batch builder, traces) and the CLI functions."""

import json
import os

import pytest

import specstate
from specstate import Window

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_windows():
    w = Window.chain(4)
    assert w.is_chain() and w.size() == 4 and len(w) == 4 and w.parents() == [-1, 0, 1, 2]
    t = Window.from_parents([-1, 0, 0, 1])
    assert not t.is_chain() and t.children(0) == [1, 2] and t.path_to(3) == [0, 1, 3]
    assert t.depth(3) == 3 and t.max_depth() == 3 and t.describe() == "tree[-1,0,0,1]"
    fc, ns = t.to_links()
    assert Window.from_links(fc, ns) == t
    assert Window.from_parents([-1, 0, 1]) == Window.chain(3)
    # Equal windows hash equally (they key dicts and sets by value).
    assert hash(Window.from_parents([-1, 0, 1])) == hash(Window.chain(3))
    assert len({Window.chain(3), Window.chain(3), t}) == 2
    assert {Window.chain(3): "x"}.get(Window.from_parents([-1, 0, 1])) == "x"
    with pytest.raises(specstate.InvalidArgumentError, match="parents"):
        Window.from_parents([-1, 2])
    with pytest.raises(specstate.InvalidArgumentError):
        Window.chain(0)
    specstate.check_path(t, [0, 1, 3])
    with pytest.raises(specstate.InvalidArgumentError, match="mypath"):
        specstate.check_path(t, [0, 3], "mypath")


def test_greedy_acceptance():
    acc = specstate.accept_greedy_chain([5, 7, 9, 4], [7, 9, 1, 8])
    assert acc.path == [0, 1, 2] and acc.bonus_token == 1 and acc.accepted_length() == 3
    assert acc.commit_value(False) == 3 and acc.emitted([5, 7, 9, 4]) == [7, 9, 1]
    t = Window.from_parents([-1, 0, 0, 1])
    acc = specstate.accept_greedy_tree(t, [5, 6, 7, 8], [7, 0, 3, 0])
    assert acc.path == [0, 2] and acc.bonus_token == 3 and acc.commit_value(True) == 2
    assert specstate.accept_greedy(t, [5, 6, 7, 8], [7, 0, 3, 0]).path == [0, 2]
    with pytest.raises(specstate.InvalidArgumentError, match="tokens: 3 entries"):
        specstate.accept_greedy(t, [5, 6, 7], [7, 0, 3, 0])
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"path\[1\] = 2 is outside tokens \(2 entries\)"):
        acc.emitted([1, 2])
    # Lists of a result are copies: an in-place edit raises instead of being lost.
    with pytest.raises(TypeError, match="Acceptance.path returns a copy"):
        acc.path.append(3)


def test_batch_builder():
    cfg = specstate.GdnConfig(num_k_heads=1, num_v_heads=1, head_k_dim=4, head_v_dim=4)
    pool = specstate.StatePool(specstate.ModelConfig.gated_delta_net(1, cfg),
                               specstate.PoolOptions(num_slots=3, max_rows=4, max_window=4))
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    builder = specstate.VerifyBatchBuilder(specstate.VerifyBatchBuilder.power_of_two_buckets(4))
    assert builder.buckets() == [1, 2, 4]
    assert builder.add(a, Window.chain(4)) == 0
    builder.add(b, Window.chain(3))
    builder.add(c, Window.chain(2))
    plan = builder.build()
    assert plan.rows() == 4 and plan.live_rows == 3 and plan.window() == 4
    assert plan.batch.rows[3].is_padding() and plan.token_offsets == [0, 4, 8, 12, 16]
    assert plan.commit_lengths([2, 1, 0]) == [2, 1, 0, 0]
    tokens = [1, 2, 3, 4] * 4
    target = [2, 3, 0, 0] * 4
    accs = plan.accept_greedy(tokens, target)
    assert [x.accepted_length() for x in accs] == [3, 3, 2]
    assert plan.commit_values(accs) == [3, 3, 2, 0]
    pool.begin_verify(plan.batch)
    assert len(pool.current_batch.rows) == 4
    with pytest.raises(specstate.InvalidArgumentError):
        builder.add(a, Window.chain(2))  # slot already in the batch


def test_traces_round_trip(tmp_path):
    shape = specstate.TraceShape(requests=3, rounds=5, window=Window.chain(4), seed=7)
    trace = specstate.generate_geometric(shape, 0.6)
    assert len(trace.records) == 15 and trace.num_rounds() == 5 and trace.max_window() == 4
    text = specstate.write_trace(trace)
    back = specstate.parse_trace(text, "mem")
    assert specstate.write_trace(back) == text
    assert [r.path for r in back.records] == [r.path for r in trace.records]
    path = str(tmp_path / "t.jsonl")
    specstate.write_trace_file(path, trace)
    assert specstate.write_trace(specstate.read_trace(path)) == text
    # os.PathLike as export_slot takes it (it took a str only)
    specstate.write_trace_file(tmp_path / "p.jsonl", trace)
    assert specstate.write_trace(specstate.read_trace(tmp_path / "p.jsonl")) == text
    with pytest.raises(TypeError, match="read_trace: path: expected a str or os.PathLike, got int"):
        specstate.read_trace(3)
    assert len(trace.round(2)) == 3 and sum(trace.accepted_histogram()) == 15
    fixed = specstate.generate_fixed(shape, 2)
    assert fixed.mean_accepted_length() == 2.0
    emp = specstate.generate_empirical(shape, [0.0, 1.0])
    assert all(r.accepted_length() == 2 for r in emp.records)
    with pytest.raises(specstate.InvalidArgumentError, match=r"mem:1"):
        specstate.parse_trace("{not json\n", "mem")
    bad = specstate.Trace()
    rec = specstate.TraceRecord()
    rec.request, rec.path = 9, [0]
    bad.requests = [0]  # declared, so that the record's own request is what is refused
    bad.records = [rec]
    with pytest.raises(specstate.InvalidArgumentError, match="request 9 is not declared"):
        specstate.validate_trace(bad)


def test_errors_with_bytes_that_are_not_utf8_keep_their_class():
    """A message holding bytes of the input that are not UTF-8 (nlohmann's "last read: ...",
    cut inside a character) came out as UnicodeDecodeError, which no `except
    specstate.InvalidArgumentError` caught."""
    header = '{"format": "specstate-trace", "version": 1, "requests": [0]}\n'
    for text in ("\u00e9\n", header + "\u00e9\u00e9\n"):
        with pytest.raises(specstate.InvalidArgumentError, match="not valid JSON"):
            specstate.parse_trace(text, "mem")


def test_a_nul_in_the_callers_text_keeps_the_whole_message():
    """A NUL in parse_trace's source or check_path's label cut the message there: only
    "invalid argument: a", no line and no reason."""
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"a\\x00b:1: the first line must be the header"):
        specstate.parse_trace("{}", "a\0b")
    w = specstate.Window.from_parents([-1, 0, 0, 1])
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"my\\x00path: path\[1\] = 99 is not a node"):
        specstate.check_path(w, [0, 99], "my\0path")


def test_list_fields_are_copies_and_plans_read_only():
    """Trace.records / requests and BatchPlan.windows gave views into the C++ vector: after
    `t.records = t.records + [...]` an element read earlier pointed into freed memory (writing
    through it corrupted the heap), and BatchPlan's fields were writable, so accept_greedy and
    commit_values indexed with offsets and counts nobody checked (a segfault, a heap abort)."""
    t = specstate.generate_fixed(specstate.TraceShape(requests=2, rounds=1), 2)
    r = t.records[0]
    t.records = t.records + [specstate.TraceRecord()]
    r.path = list(range(64))  # a copy: the trace is unchanged, nothing is freed
    specstate.generate_fixed(specstate.TraceShape(requests=64, rounds=64), 2)
    assert (r.request, r.round) == (0, 0) and len(t.records) == 3 and t.records[0].path == [0, 1]
    for field in ("records", "requests"):
        with pytest.raises(TypeError, match=f"Trace.{field} returns a copy"):
            getattr(t, field).append(None)
    t.requests = [0, 1, 5]
    assert t.requests == [0, 1, 5]

    cfg = specstate.GdnConfig(num_k_heads=1, num_v_heads=1, head_k_dim=4, head_v_dim=4)
    pool = specstate.StatePool(specstate.ModelConfig.gated_delta_net(1, cfg),
                               specstate.PoolOptions(num_slots=2, max_rows=2, max_window=3))
    builder = specstate.VerifyBatchBuilder()
    builder.add(pool.acquire(), Window.chain(2))
    builder.add(pool.acquire(), Window.from_parents([-1, 0, 0]))
    plan = builder.build()
    w = plan.windows[0]
    for field, value in (("live_rows", 50), ("token_offsets", [0, 10**9, 4]),
                         ("windows", [Window.chain(3)]), ("batch", specstate.VerifyBatch())):
        with pytest.raises(AttributeError):
            setattr(plan, field, value)
    with pytest.raises(TypeError, match="BatchPlan.windows returns a copy"):
        plan.windows.append(Window.chain(1))
    assert w.parents() == [-1, 0] and plan.live_rows == 2 and plan.token_offsets == [0, 3, 6]
    assert [a.accepted_length() for a in plan.accept_greedy([1] * 6, [1] * 6)] == [2, 2]


@pytest.mark.skipif(not specstate.HAS_CLI, reason="built without CLI11: no plan/check_golden")
def test_cli_functions_refuse_nul_bytes():
    """A NUL byte ended the command line's C string: plan(model="tiny\\0junk") ran "tiny", and
    check_golden's error for a backend with a NUL stopped at it."""
    with pytest.raises(ValueError, match=r"plan: model: 'tiny\\x00junk' holds a NUL byte"):
        specstate.plan(model="tiny\0junk")
    with pytest.raises(ValueError, match=r"backend: 'cpu\\x00x', expected 'cpu' or 'cuda'"):
        specstate.check_golden([], backend="cpu\0x")
    with pytest.raises(ValueError, match=r"check_golden: paths\[1\]: 'b\\x00' holds a NUL"):
        specstate.check_golden(["a", "b\0"], backend="cpu")
    with pytest.raises(ValueError, match=r"_cli_main: argv\[1\]: 'plan\\x00' holds a NUL"):
        specstate._specstate._cli_main(["specstate", "plan\0"])
    assert specstate.plan(model="tiny")["committed_bytes_per_request"] > 0


@pytest.mark.skipif(not specstate.HAS_CLI, reason="built without CLI11: no plan/check_golden")
def test_plan():
    p = specstate.plan(model="qwen3-next-80b", tp=1, max_requests=64, window=4)
    assert p["committed_bytes_per_request"] == 77266944
    assert p["committed_bytes_total"] == 64 * 77266944
    with pytest.raises(ValueError, match="plan"):
        specstate.plan(model="no-such-model")
    assert p["strategy"] == "snapshot" and p["records_bytes_per_slot"] == 0
    # The replay plan (its docstring promised the rings, which no argument could ask for).
    r = specstate.plan(model="qwen3-next-80b", strategy="replay")
    assert r["strategy"] == "replay"
    assert r["replay_ring"] == 12 and r["records_bytes_per_slot"] == 11290048
    assert len(r["replay_rings"]) > 1
    with pytest.raises(ValueError, match="strategy = 'both', expected 'snapshot' or 'replay'"):
        specstate.plan(strategy="both")


@pytest.mark.skipif(not specstate.HAS_CLI, reason="built without CLI11: no plan/check_golden")
def test_check_golden():
    golden = os.path.join(ROOT, "tests", "data", "golden")
    if not os.path.isdir(golden):
        pytest.skip("no golden cases in this checkout")
    code, report = specstate.check_golden([golden])
    assert code == 0, report
    # Every case of the folder ran (a report naming none passed with the old `or "A" in report`).
    for name in sorted(os.listdir(golden)):
        if name.endswith(".safetensors"):
            assert "(" + name + ")" in report, (name, report)
    with pytest.raises(ValueError, match="backend"):
        specstate.check_golden([golden], backend="tpu")
    # A backend that cannot run here is refused naming it before any case runs (as the
    # command's exit 2); it used to return (1, "0 passed, 5 failed").
    try:
        code, report = specstate.check_golden([golden], backend="cuda")
    except specstate.NotSupportedError as e:
        assert "backend cuda cannot run here" in str(e), str(e)
    else:
        assert code == 0 and "0 passed" not in report, report  # a GPU machine ran the cases


@pytest.mark.skipif(not specstate.HAS_CLI, reason="built without CLI11: no plan/check_golden")
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full to fail a write on")
def test_cli_main_runs_again_after_a_failed_write(capfd):
    """One process may run several commands (the console script's _cli_main): a command whose
    standard output could not be written left std::cout failed, and every later command in the
    process printed nothing and exited 1."""
    cli_main = specstate._specstate._cli_main
    saved = os.dup(1)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, 1)
        assert cli_main(["specstate", "plan", "--model", "tiny", "--json"]) == 1
    finally:
        os.dup2(saved, 1)
        os.close(full)
        os.close(saved)
    capfd.readouterr()
    assert cli_main(["specstate", "plan", "--model", "tiny", "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["committed_bytes_per_request"] > 0, (out, err)
    assert "writing standard output failed" not in err


def test_bounds_are_exported_and_enforced():
    """The bounds of spec/ and ModelConfig, as constants, each one enforced at its edge."""
    assert specstate.MAX_WINDOW_NODES == 65536
    assert specstate.Window.chain(specstate.MAX_WINDOW_NODES).size() == specstate.MAX_WINDOW_NODES
    with pytest.raises(specstate.InvalidArgumentError, match="kMaxWindowNodes"):
        specstate.Window.chain(specstate.MAX_WINDOW_NODES + 1)
    assert specstate.VerifyBatchBuilder.power_of_two_buckets(
        specstate.MAX_BATCH_ROWS)[-1] == specstate.MAX_BATCH_ROWS
    with pytest.raises(specstate.InvalidArgumentError, match="max_rows = 1048577"):
        specstate.VerifyBatchBuilder.power_of_two_buckets(specstate.MAX_BATCH_ROWS + 1)
    assert specstate.MAX_BATCH_TOKENS == specstate.MAX_TRACE_NODES == 2**26
    shape = specstate.TraceShape(requests=specstate.MAX_TRACE_RECORDS // 2, rounds=3)
    with pytest.raises(specstate.InvalidArgumentError, match="kMaxTraceRecords"):
        specstate.generate_fixed(shape, 1)
    assert specstate.MAX_TRACE_WINDOW == 1024 and specstate.MAX_TRACE_LINE_BYTES == 16 << 20
    assert specstate.ModelConfig.MAX_SLOT_BYTES == 2**48
    layer = specstate.GdnConfig(conv_width=2**31 - 1)
    with pytest.raises(specstate.InvalidArgumentError, match="more than 2\\^48"):
        specstate.ModelConfig.gated_delta_net(64, layer).validate()


_SHRINKING_LIST = """
import specstate

class Shrink:
    # An item whose __index__ empties the list being converted (and refills the heap).
    def __init__(self, lst):
        self.lst = lst

    def __index__(self):
        self.lst.clear()
        self.junk = [bytes(64) for _ in range(5000)]
        return 1

def shrinking():
    lst = []
    lst.append(Shrink(lst))
    lst.extend(10**12 + i for i in range(3000))
    return lst

calls = {
    "VerifyBatch": lambda: specstate.VerifyBatch([], window=2, lengths=shrinking()),
    "from_parents": lambda: specstate.Window.from_parents(shrinking()),
    "requests": lambda: setattr(specstate.Trace(), "requests", shrinking()),
    "empirical": lambda: specstate.generate_empirical(specstate.TraceShape(), shrinking()),
}
for name, call in calls.items():
    try:
        call()
    except (specstate.Error, TypeError, ValueError) as e:
        print(name, type(e).__name__, e)
"""


def test_list_arguments_are_read_from_a_copy_and_named(tmp_path):
    """A list argument's items are converted from a copy taken first: an item whose __index__
    empties the list segfaulted the interpreter (nanobind's list caster read freed memory).
    Bools are no counts, oversized values and sequences are refused naming the argument, the
    item and the value."""
    import subprocess
    import sys

    script = tmp_path / "shrinking_list.py"
    script.write_text(_SHRINKING_LIST)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    # Trace.requests (int64) takes the copy's values; the others refuse one of them by name.
    assert len(lines) == 3, run.stdout
    assert any("VerifyBatch.lengths[1] = 1000000000000 is out of range" in s for s in lines)
    assert any("Window.from_parents: parents[1] = 1000000000000" in s for s in lines)

    with pytest.raises(TypeError, match=r"VerifyBatch\.lengths\[0\]: expected an int, got bool"):
        specstate.VerifyBatch(lengths=[True, 2])
    with pytest.raises(TypeError, match=r"VerifyBatch\.parents\[1\]: expected an int, got bool"):
        specstate.VerifyBatch(window=2, parents=[-1, False])
    with pytest.raises(specstate.OutOfRangeError, match=r"VerifyBatch\.lengths\[0\] = 2147483648"):
        specstate.VerifyBatch(lengths=[2**31])
    with pytest.raises(specstate.OutOfRangeError, match=r"VerifyBatch\.lengths: 1000000000000 items"):
        specstate.VerifyBatch(lengths=range(10**12))
    with pytest.raises(TypeError, match=r"Window\.chain: length: expected an int, got bool"):
        Window.chain(True)
    with pytest.raises(specstate.OutOfRangeError, match=r"Window\.chain: length = 2147483648"):
        Window.chain(2**31)
    with pytest.raises(TypeError, match=r"Window\.from_parents: parents: expected a sequence"):
        Window.from_parents("-1")
    with pytest.raises(TypeError, match=r"Trace\.requests\[0\]: expected an int, got bool"):
        specstate.Trace().requests = [True]
    with pytest.raises(TypeError, match=r"TraceRecord\.path\[0\]: expected an int, got float"):
        specstate.TraceRecord().path = [0.5]
    with pytest.raises(TypeError, match=r"generate_empirical: weights\[1\]: expected a float"):
        specstate.generate_empirical(specstate.TraceShape(), [0.5, True])
    with pytest.raises(TypeError, match=r"default_replay_ring: max_window: expected an int"):
        specstate.default_replay_ring(True)
    with pytest.raises(TypeError, match=r"replay_fold_limit: rows: expected an int, got bool"):
        specstate.replay_fold_limit(4, 12, True)
    # Scalar arguments of the spec helpers: a bool is no node, row count or probability.
    import numpy as np

    w = Window.from_parents([-1, 0, 0])
    for call, name in ((w.parent, "Window.parent: node"), (w.children, "Window.children: node"),
                       (w.path_to, "Window.path_to: node"), (w.depth, "Window.depth: node"),
                       (specstate.VerifyBatchBuilder.power_of_two_buckets,
                        "VerifyBatchBuilder.power_of_two_buckets: max_rows"),
                       (specstate.Trace().round, "Trace.round: round")):
        with pytest.raises(TypeError, match=rf"{name}: expected an int, got bool"):
            call(True)
    with pytest.raises(specstate.OutOfRangeError, match=r"Window.parent: node = 2147483648"):
        w.parent(2**31)
    assert w.parent(2) == 0 and w.children(0) == [1, 2] and w.depth(np.int64(1)) == 2
    with pytest.raises(TypeError, match=r"generate_geometric: alpha: expected a float, got bool"):
        specstate.generate_geometric(specstate.TraceShape(), True)
    assert len(specstate.generate_geometric(specstate.TraceShape(rounds=2), 0.5).records) == 2
    # A sequence with no length names the argument; an exception of an item's own __float__
    # that is no conversion error (KeyboardInterrupt) is raised as it was.
    class NoLen:
        def __getitem__(self, i):
            if i < 2:
                return i
            raise IndexError(i)

    with pytest.raises(TypeError, match=r"VerifyBatch.lengths: expected a sequence of numbers "
                                        r"with a length, got NoLen"):
        specstate.VerifyBatch(lengths=NoLen())

    class Interrupting:
        def __float__(self):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        specstate.generate_empirical(specstate.TraceShape(), [Interrupting()])
    with pytest.raises(KeyboardInterrupt):
        specstate.GdnConfig().scale = Interrupting()
    # What was accepted still is: tuples, ranges, bytearrays and NumPy integer arrays, as copies.
    assert specstate.VerifyBatch(lengths=bytearray([1, 2])).lengths == [1, 2]
    import numpy as np

    b = specstate.VerifyBatch(window=3, parents=np.array([-1, 0, 0]), lengths=range(1, 3))
    assert b.parents == [-1, 0, 0] and b.lengths == [1, 2]
    assert Window.from_parents((-1, 0, 1)) == Window.chain(3)
    a = specstate.accept_greedy_chain(np.array([5, 6]), (6, 7))
    assert a.path == [0, 1] and a.bonus_token == 7
    t = specstate.Trace()
    t.requests = (3, 4)
    assert t.requests == [3, 4]


_FIFO_TRACE = """
import os, sys, threading
import specstate

path = sys.argv[1]
os.mkfifo(path)
text = specstate.write_trace(specstate.generate_fixed(specstate.TraceShape(requests=2, rounds=3), 2))

def writer():
    with open(path, "w") as f:  # blocks until read_trace opens the FIFO
        f.write(text)

t = threading.Thread(target=writer)
t.start()
trace = specstate.read_trace(path)  # the writer is a Python thread: it needs the GIL
t.join()
print(len(trace.records))
"""


def test_read_trace_from_a_fifo_written_by_another_python_thread(tmp_path):
    """read_trace held the GIL while its open(2) of a FIFO waited for a writer: a writer in
    another Python thread never ran (a deadlock). Run in a subprocess with a timeout."""
    import subprocess
    import sys

    script = tmp_path / "fifo_trace.py"
    script.write_text(_FIFO_TRACE)
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "trace.fifo")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "6"
