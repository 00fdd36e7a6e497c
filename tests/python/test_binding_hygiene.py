"""The bindings' own hygiene (the twenty-first session's review of the Python package): a refused
constructor keeps none of the arrays it took, long C++ calls release the GIL, lazy torch views
are refused, errors name what the caller passed, and reprs show the fields as set."""

import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import specstate
from conftest import Model, states


def f32(*shape):
    return np.ones(shape, np.float32)


@pytest.mark.parametrize("make", [
    lambda a: specstate.GdnWeights(a, a, a, "not an array"),
    lambda a: specstate.GdnInputs(a, a, "not an array"),
    lambda a: specstate.GdnOutputs(a, "not an array"),
    lambda a: specstate.Mamba2Weights(a, a, a, a, "not an array"),
    lambda a: specstate.Mamba2Inputs(a, a, "not an array"),
    lambda a: specstate.Mamba2Outputs(a, "not an array"),
    lambda a: specstate.KdaWeights(a, a, a, "not an array"),
    lambda a: specstate.KdaInputs(a, a, "not an array"),
    lambda a: specstate.KdaOutputs(a, "not an array"),
])
def test_a_refused_constructor_keeps_no_array(make):
    # Each constructor converted its arguments into the object one by one; one that raised kept
    # the arrays before it for ever (nanobind runs no destructor for an object never built):
    # 100 refused GdnWeights left an array's refcount at 402.
    a = f32(4, 4)
    before = sys.getrefcount(a)
    for _ in range(50):
        with pytest.raises((TypeError, ValueError)):
            make(a)
    assert sys.getrefcount(a) == before


def _runs_beside(call):
    """The share of its free rate at which a spinning Python thread ran while `call` ran: near 1
    where the call releases the GIL, a few percent where it holds it (the thread runs only in the
    switch intervals around the call). Returns (share, seconds the call took)."""
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    c0, t0 = count[0], time.perf_counter()
    time.sleep(0.1)  # the main thread sleeps: the spinner's free rate
    rate = (count[0] - c0) / (time.perf_counter() - t0)
    start = count[0]
    t0 = time.perf_counter()
    call()
    elapsed = time.perf_counter() - t0
    during = count[0] - start
    stop.set()
    t.join()
    return during / max(rate * elapsed, 1.0), elapsed


def _share_of(make_call, n=1 << 17, seconds=0.12, cap=1 << 23):
    """_runs_beside of make_call(n), n doubled until the call takes `seconds` (a slow or a fast
    machine alike; the switch intervals around a call that holds the GIL, 2 x 5 ms, are then at
    most 8% of it)."""
    while True:
        share, elapsed = _runs_beside(make_call(n))
        if elapsed >= seconds or n >= cap:
            return share, elapsed, n
        n *= 2


def test_trace_calls_release_the_gil():
    shape = lambda n: specstate.TraceShape(requests=16, rounds=max(1, n // 16))  # noqa: E731
    traces = {}

    def trace(n):
        if n not in traces:
            traces[n] = specstate.generate_fixed(shape(n), 2)
        return traces[n]

    texts = {}

    def text(n):
        if n not in texts:
            texts[n] = specstate.write_trace(trace(n))
        return texts[n]

    cases = {
        "parse_trace": lambda n: (lambda t=text(n): specstate.parse_trace(t)),
        "write_trace": lambda n: (lambda t=trace(n): specstate.write_trace(t)),
        "generate_fixed": lambda n: (lambda: specstate.generate_fixed(shape(n), 2)),
        "generate_geometric": lambda n: (lambda: specstate.generate_geometric(shape(n), 0.7)),
        "generate_empirical": lambda n: (
            lambda: specstate.generate_empirical(shape(n), [0.2, 0.3, 0.5])),
        # The reference: validate_trace keeps the GIL.
        "validate_trace": lambda n: (lambda t=trace(n): specstate.validate_trace(t)),
    }
    # A loaded machine (a parallel build) perturbs one measurement: a case that misses is measured
    # again, up to three times, against the lowest share the GIL-holding reference showed; a call
    # that keeps the GIL misses every time.
    reference = cases.pop("validate_trace")
    held = _share_of(reference)[0]
    for name, make in cases.items():
        for attempt in range(3):
            share, elapsed, n = _share_of(make)
            if share > max(0.15, 4 * held):
                break
            held = min(held, _share_of(reference)[0])
        assert share > max(0.15, 4 * held), (
            f"{name}: another thread ran at {share:.0%} of its rate during {elapsed:.2f} s "
            f"({n} records; {held:.0%} beside validate_trace, which keeps the GIL; 3 attempts)")


def test_pool_construction_releases_the_gil():
    model = Model(layers=4)
    share, elapsed, n = _share_of(lambda n: (lambda: specstate.StatePool(
        model.config, specstate.PoolOptions(num_slots=n, max_rows=8, max_window=4))),
        n=1 << 14, cap=1 << 20)
    assert share > 0.15, f"another thread ran at {share:.0%} in {elapsed:.2f} s ({n} slots)"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_write_trace_file_to_a_fifo_read_by_another_thread(tmp_path):
    # It held the GIL while the FIFO's open waited for its reader: a reader thread of the same
    # process never ran, and the call hung (so the scenario runs in a child, under a timeout).
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    script = f"""
import threading, time, specstate
trace = specstate.generate_fixed(specstate.TraceShape(requests=2, rounds=3), 1)
got = []
def reader():
    time.sleep(0.3)  # the writer waits in open() first
    with open({str(fifo)!r}) as f:
        got.append(f.read())
t = threading.Thread(target=reader, daemon=True)
t.start()
specstate.write_trace_file({str(fifo)!r}, trace)
t.join(timeout=10)
assert got and got[0] == specstate.write_trace(trace), got
print("ok")
"""
    try:
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("write_trace_file to a FIFO whose reader is a thread of the process hung")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_lazily_negated_torch_tensors_are_refused():
    torch = pytest.importorskip("torch")
    z = torch.complex(torch.ones(4, 8), torch.full((4, 8), 0.5))
    lazy = z.conj().imag  # -0.5 everywhere, with the negative bit set over +0.5 in memory
    assert lazy.is_neg()
    with pytest.raises(ValueError, match=r"inputs\.mixed_qkv.*negative bit.*resolve_neg"):
        specstate.GdnInputs(lazy, lazy, lazy)
    specstate.GdnInputs(lazy.resolve_neg(), lazy.resolve_neg(), lazy.resolve_neg())


def test_plan_refuses_a_negative_max_rows():
    with pytest.raises(ValueError, match=r"max-rows.*-5"):
        specstate.plan(max_rows=-5)
    assert specstate.plan(max_rows=0)["max_rows"] > 0  # 0: the default


def test_reprs_show_the_fields_as_set():
    big = specstate.GdnConfig(num_k_heads=2**31 - 1, head_k_dim=2**31 - 1)
    text = repr(specstate.ModelConfig.gated_delta_net(2, big))
    # conv_dim() of this config overflows int64: the repr printed 9223372028264845314.
    assert "kind=gated_delta_net" in text and "num_k_heads=2147483647" in text
    assert "conv_dim" not in text
    m = repr(specstate.ModelConfig.mamba2(3, specstate.Mamba2Config(d_state=64)))
    assert "kind=mamba2" in m and "Mamba2Config(" in m and "d_state=64" in m
    assert "dt_min=None" in repr(specstate.Mamba2Config())
    g = repr(specstate.GdnConfig(scale=0.5, conv_bias=True))
    assert "scale=0.5" in g and "conv_bias=True" in g
    assert "lower_bound=-5.0" in repr(specstate.KdaConfig(lower_bound=-5.0))
    # float32 fields as set, not widened to double (0.10000000149011612)
    assert "scale=0.1," in repr(specstate.GdnConfig(scale=0.1))
    assert "dt_min=0.001," in repr(specstate.Mamba2Config(dt_min=1e-3))
    assert "lower_bound=-1e-06," in repr(specstate.KdaConfig(lower_bound=-1e-6))


def test_handle_arguments_are_named():
    model = Model(layers=1)
    pool = specstate.StatePool(model.config, specstate.PoolOptions(num_slots=4))
    h = pool.acquire()
    for call, name in [(lambda: pool.release(None), "handle"),
                       (lambda: pool.is_live(0), "handle"),
                       (lambda: pool.slot_index(1), "handle"),
                       (lambda: pool.reset("h"), "handle"),
                       (lambda: pool.fork(None), "src"),
                       (lambda: pool.copy_slot(h, 3), "dst"),
                       (lambda: pool.export_slot(None), "handle"),
                       (lambda: pool.import_slot(2, np.zeros(8, np.uint8)), "handle")]:
        with pytest.raises(TypeError, match=rf"^{name}: expected a SlotHandle"):
            call()
    assert pool.is_live(h)  # nothing changed
    # The layer calls and the handle lists: a slot index is named (index and hint) instead of
    # nanobind's list of overloads.
    w, out = model.weights[0], model.outputs(1)
    inp = specstate.GdnInputs(*model.inputs(1)[0])
    for call, name in [(lambda: pool.prefill(0, 1, w, inp, out), "handle"),
                       (lambda: pool.decode(0, [h, 1], w, inp, out), r"rows\[1\]"),
                       (lambda: pool.prefill_batch(0, [1], [1], w, inp, out), r"handles\[0\]"),
                       (lambda: pool.materialize([h, 2]), r"handles\[1\]"),
                       (lambda: specstate.VerifyBatch([1], window=2), r"VerifyBatch.rows\[0\]")]:
        with pytest.raises(TypeError, match=rf"^{name}: expected a SlotHandle.*a slot index\?"):
            call()
    with pytest.raises(TypeError, match=r"^rows: expected a sequence of SlotHandle, got str"):
        pool.decode(0, "h", w, inp, out)
    assert pool.is_live(h)


def test_export_slot_errors_name_the_callers_array():
    model = Model(layers=2)
    pool = specstate.StatePool(model.config, specstate.PoolOptions(num_slots=4))
    h = pool.acquire()
    n = pool.slot_state_bytes()
    inside = np.from_dlpack(pool.ssm_state(0)).view(np.uint8).reshape(-1)[:n]
    with pytest.raises(specstate.Error, match=rf"dst \(uint8\[{n}\] cpu\) overlaps"):
        pool.export_slot(h, inside)


def test_copied_list_in_place_operators_leave_the_copy():
    model = Model(layers=1)
    pool = specstate.StatePool(model.config, specstate.PoolOptions(num_slots=4))
    h, g = pool.acquire(), pool.acquire()
    batch = specstate.VerifyBatch([h], window=2)
    rows = batch.rows
    rows += [g]  # a new list: the field's copy and the field keep one row
    assert len(rows) == 2 and len(batch.rows) == 1
    batch.rows += [g]  # assigned back: the field changes
    assert len(batch.rows) == 2


def test_to_numpy_refuses_lazily_negated_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch._neg_view(torch.arange(3, dtype=torch.float32))
    assert x.is_neg()
    with pytest.raises(ValueError, match="negative bit"):
        specstate.to_numpy(x)
    assert specstate.to_numpy(x.resolve_neg()).tolist() == [-0.0, -1.0, -2.0]

    class Sub(torch.Tensor):  # a subclass defined outside torch (its module is this test's)
        pass

    y = torch._neg_view(torch.arange(3, dtype=torch.float32)).as_subclass(Sub)
    assert y.is_neg() and not type(y).__module__.startswith("torch")
    with pytest.raises(ValueError, match="negative bit"):
        specstate.to_numpy(y)


def test_vllm_notes_name_only_the_tensor_in_the_error():
    kimi = specstate.ModelConfig.kda(1, specstate.KdaConfig(
        num_k_heads=2, num_v_heads=2, head_k_dim=16, head_v_dim=16,
        act_dtype=specstate.DType.F32, conv_state_dtype=specstate.DType.F32))
    conv = [np.zeros(specstate.vllm.conv_shape(kimi, 4), np.float32)]
    # vLLM's shape (slots, HV, V, K), so that vllm.state_pool's own shape check passes and the
    # pool itself refuses it: a K stride of 2 (every other column of a wider buffer).
    bad = [np.zeros((4, 2, 16, 32), np.float32)[..., ::2]]
    assert bad[0].shape == specstate.vllm.recurrent_shape(kimi, 4)
    with pytest.raises(specstate.Error) as e:
        specstate.vllm.state_pool(kimi, specstate.PoolOptions(num_slots=4),
                                  conv_states=conv, recurrent_states=bad)
    message = str(e.value)
    assert "recurrent_states" in message and "committed" not in message  # the caller's name
    assert "conv state" not in message  # nothing of the conv tensors' transposes
    # In the KV order the recurrent states are handed over transposed: that note, and still
    # none about the conv states.
    bad_kv = [np.zeros((4, 2, 32, 16), np.float32)[:, :, ::2, :]]
    assert bad_kv[0].shape == specstate.vllm.recurrent_shape(kimi, 4, specstate.SsmLayout.KV)
    with pytest.raises(specstate.Error) as e:
        specstate.vllm.state_pool(kimi, specstate.PoolOptions(num_slots=4), conv_states=conv,
                                  recurrent_states=bad_kv, order=specstate.SsmLayout.KV)
    message = str(e.value)
    assert "recurrent_states" in message
    assert "transposed view of each recurrent state (order KV)" in message
    assert "conv state" not in message


PLAN_BESIDE_CLI = r"""
import json, threading
import specstate
from specstate import _specstate
done = []
def cli():
    for _ in range(150):
        _specstate._cli_main(["specstate", "plan", "--json", "--model", "tiny"])
    done.append(1)
t = threading.Thread(target=cli)
t.start()
calls = 0
while t.is_alive() or calls == 0:
    assert specstate.plan(model="tiny")["committed_bytes_per_request"] > 0
    calls += 1
t.join()
print("plan calls", calls, "cli runs", len(done))
"""


@pytest.mark.skipif(not specstate.HAS_CLI, reason="built without CLI11: no plan/check_golden")
def test_plan_beside_the_command_line_on_another_thread():
    """plan() pointed the process's std::cout at its own buffer while _cli_main (no GIL) wrote to
    std::cout on another thread: heap corruption (the process died), documents lost. Now plan()
    writes its document to its own stream: every call parses and every command line's document
    reaches stdout. In a child process: the old failure killed the interpreter."""
    r = subprocess.run([sys.executable, "-c", PLAN_BESIDE_CLI], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cli runs 1" in r.stdout
    assert r.stdout.count('"committed_bytes_per_request"') == 150  # the command line's documents


@pytest.mark.skipif(not specstate.HAS_CLI, reason="built without CLI11: no plan/check_golden")
def test_cli_main_of_an_empty_argv_is_refused():
    """An empty list ran the command line with argv[0] = NULL: a segfault in CLI11 (so the call
    runs in a child process)."""
    r = subprocess.run([sys.executable, "-c", "from specstate import _specstate\n"
                        "_specstate._cli_main([])"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr[-1000:])
    assert "ValueError: _cli_main: argv is empty (argv[0] is the program name)" in r.stderr


class _Exporter:
    """An object exporting another array's memory through DLPack (a wrapper, a JAX array): it may
    let go of that array while an array made from it lives."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *args, **kwargs):
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_bf16_bits_keep_the_imported_memory_not_the_exporter():
    """to_numpy of a bf16 array goes through _bf16_bits, which kept the exporter object alive and
    dropped its import: once the exporter let go of its array, the bits read freed memory (here a
    pool view, whose count close() trusts: the pool was freed under them)."""
    model = Model(act=specstate.DType.BF16)
    pool = model.pool(specstate.Strategy.SNAPSHOT)
    h = pool.acquire()
    state = np.random.default_rng(3).standard_normal(pool.slot_state_bytes() // 4)
    pool.import_slot(h, model_slot_bytes(pool, state))
    exporter = _Exporter(pool.conv_state(0, h))
    bits = specstate.to_numpy(exporter)
    want = np.array(bits.view(np.uint16))
    assert want.any()
    exporter.array = None
    with pytest.raises(specstate.FailedPreconditionError, match=r"1 zero-copy view"):
        pool.close()
    assert np.array_equal(bits.view(np.uint16), want)
    del bits
    pool.close()


def model_slot_bytes(pool, values):
    """A slot state of `pool` (export_slot's format) holding `values` where the states are: the
    header of an exported zero slot, then the values' bytes."""
    blank = pool.export_slot(pool.acquire())
    header = pool.SLOT_STATE_HEADER_BYTES
    body = np.frombuffer(values.astype(np.float32).tobytes(), np.uint8)[:blank.size - header]
    return np.concatenate([blank[:header], body])


def test_the_pools_stream_object_is_kept_alive():
    """pool.stream = obj kept only the handle: a stream object that destroys its stream when
    collected (CuPy's) was collected while the pool went on ordering its work on the handle."""
    import gc
    import weakref

    class Stream:
        def __init__(self, handle):
            self.handle = handle

        def __cuda_stream__(self):
            return (0, self.handle)

    pool = Model().pool(specstate.Strategy.SNAPSHOT)
    s = Stream(0x5EED)
    alive = weakref.ref(s)
    pool.stream = s
    del s
    gc.collect()
    assert alive() is not None and pool.stream == 0x5EED
    pool.stream = None  # the default again: the object is let go
    gc.collect()
    assert alive() is None and pool.stream == 0


def test_list_arguments_of_objects_are_bounded_and_named_item_by_item():
    """nanobind's list caster reserved len(list) elements of the C++ type before looking at any,
    inside a noexcept function: a long list of None given to Trace.records, commit_values,
    check_golden or _cli_main ended in std::terminate (an abort). Now each is bounded (what it
    takes at most) and its items are checked one by one, naming the first bad one."""
    trace = specstate.Trace()
    with pytest.raises(specstate.OutOfRangeError,
                       match=r"Trace.records: 8388609 items, at most 8388608"):
        trace.records = [None] * (8388608 + 1)
    record = specstate.TraceRecord()
    with pytest.raises(TypeError, match=r"Trace.records\[1\]: expected TraceRecord, got NoneType"):
        trace.records = [record, None]
    trace.records = (record, record)  # any sequence
    assert len(trace.records) == 2
    cfg = specstate.GdnConfig(num_k_heads=1, num_v_heads=1, head_k_dim=4, head_v_dim=4)
    pool = specstate.StatePool(specstate.ModelConfig.gated_delta_net(1, cfg),
                               specstate.PoolOptions(num_slots=1, max_rows=1, max_window=2))
    builder = specstate.VerifyBatchBuilder([1])
    builder.add(pool.acquire(), specstate.Window.chain(2))
    plan = builder.build()
    accs = plan.accept_greedy([1, 2], [2, 0])
    assert plan.commit_values(accs) == [accs[0].accepted_length()] and accs[0].accepted_length() > 0
    with pytest.raises(specstate.OutOfRangeError,
                       match=r"commit_values: accepted: 1048577 items, at most 1048576"):
        plan.commit_values([None] * (1 << 20 | 1))
    with pytest.raises(TypeError, match=r"accepted\[0\]: expected Acceptance, got int"):
        plan.commit_values([3])
    if specstate.HAS_CLI:
        with pytest.raises(specstate.OutOfRangeError, match=r"check_golden: paths: 65537 items"):
            specstate.check_golden(["x"] * 65537)
        with pytest.raises(TypeError, match=r"check_golden: paths\[1\]: expected a str, bytes "
                                            r"or os.PathLike, got int"):
            specstate.check_golden(["x", 3])
        with pytest.raises(TypeError,
                           match=r"_cli_main: argv\[0\]: expected a str or bytes, got NoneType"):
            specstate._specstate._cli_main([None])


@pytest.mark.skipif(not specstate.HAS_CLI, reason="this build has no command line")
def test_command_line_arguments_of_no_valid_utf8_pass_as_their_bytes(tmp_path):
    """The pip `specstate` command passed sys.argv on as str: a file name of no valid UTF-8, which
    Python holds with surrogate escapes, made the binding's str caster fail ("_cli_main: argv[3]:
    expected str, got str", a traceback, exit 1) where the CMake executable runs it. check_golden's
    paths likewise. Both take the name's bytes now (os.fsencode), as export_slot does."""
    model = os.path.join(os.fsencode(str(tmp_path)), b"\xff.json")
    with open(model, "w") as f:
        f.write('{"kind": "gdn", "layers": 2}')
    r = subprocess.run([sys.executable, "-m", "specstate", "plan", "--model-file", model],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"Traceback" not in r.stderr
    assert b"layers        2, all Gated DeltaNet" in r.stdout, r.stdout[:400]
    # A model name of no valid UTF-8: the command's own usage error (exit 2), no traceback.
    r = subprocess.run([sys.executable, "-m", "specstate", "plan", "--model", b"\xe9"],
                       capture_output=True, timeout=120)
    assert r.returncode == 2 and b"Traceback" not in r.stderr, r.stderr[-400:]
    # check_golden: a folder named so, as str (surrogate escapes), bytes or a Path, is read (no
    # case in it: exit 1 with a report naming it), not refused as a type.
    folder = os.path.join(os.fsencode(str(tmp_path)), b"g\xff")
    os.mkdir(folder)
    for path in (os.fsdecode(folder), folder, pathlib.Path(os.fsdecode(folder))):
        code, report = specstate.check_golden([path])
        assert code == 1 and "g\ufffd" in report, (path, report)


def test_a_sequence_whose_length_lies_is_read_to_its_length():
    """The copy of a list argument iterated until IndexError whatever __len__ said: an object of
    length 3 whose __getitem__ never raised grew until memory ran out. Exactly len() items are
    read now."""

    class Lying:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return 0

    start = time.monotonic()
    acc = specstate.accept_greedy_chain(Lying(), [0, 0, 0])
    assert acc.accepted_length() == 3 and time.monotonic() - start < 5
    trace = specstate.Trace()
    trace.requests = Lying()
    assert trace.requests == [0, 0, 0]


def test_counts_of_plan_shard_map_and_the_vllm_shapes_are_named_ints():
    """plan's tp / max_requests / max_rows / window, shard_map's tp / rank and the vLLM shapes'
    slots went through nanobind's int caster: True was taken as 1, and a value past the C++ type
    gave "incompatible function arguments", naming neither the argument nor the value."""
    cfg = specstate.ModelConfig.gated_delta_net(2, specstate.GdnConfig())
    with pytest.raises(TypeError, match=r"shard_map: tp: expected an int, got bool"):
        specstate.shard_map(cfg, True, False)
    with pytest.raises(specstate.OutOfRangeError, match=r"shard_map: tp = 2147483648"):
        specstate.shard_map(cfg, 2**31, 0)
    assert specstate.shard_map(cfg, 2, 1).tp == 2
    with pytest.raises(TypeError, match=r"conv_shape: slots: expected an int, got bool"):
        specstate.vllm.conv_shape(cfg, slots=True)
    with pytest.raises(specstate.OutOfRangeError,
                       match=r"recurrent_shape: slots = 9223372036854775808"):
        specstate.vllm.recurrent_shape(cfg, slots=2**63)
    assert specstate.vllm.conv_shape(cfg, slots=3)[0] == 3
    if specstate.HAS_CLI:
        for name in ("tp", "max_requests", "max_rows", "window"):
            with pytest.raises(TypeError, match=rf"plan: {name}: expected an int, got bool"):
                specstate.plan(model="tiny", **{name: True})
        with pytest.raises(specstate.OutOfRangeError, match=r"plan: window = 2147483648"):
            specstate.plan(model="tiny", window=2**31)
        assert specstate.plan(model="tiny", tp=1, window=2)["committed_bytes_per_request"] > 0


def test_enum_arguments_and_fields_take_only_their_enum():
    """nanobind converted ints and bools to enums implicitly: PoolOptions(strategy=True) was
    REPLAY, backend=1 CUDA, GdnConfig(act_dtype=0) F32, default_replay_ring(True, 4) Mamba2's
    ring. The fields refuse anything but their enum, naming the field; the constructors' and
    functions' enum arguments refuse it, naming the argument in the signature error (the
    configs' constructors, the field)."""
    opts = specstate.PoolOptions()
    for field, bad in (("strategy", True), ("backend", 1), ("conv_layout", 0), ("ssm_layout", 1)):
        with pytest.raises(TypeError, match=rf"PoolOptions.{field}: expected a \w+, got "):
            setattr(opts, field, bad)
    assert opts.strategy == specstate.Strategy.SNAPSHOT and opts.backend == specstate.Backend.CPU
    opts.strategy = specstate.Strategy.REPLAY
    assert opts.strategy == specstate.Strategy.REPLAY
    gdn = specstate.GdnConfig()
    with pytest.raises(TypeError, match=r"GdnConfig.act_dtype: expected a DType, got int"):
        gdn.act_dtype = 0
    mamba = specstate.Mamba2Config()
    with pytest.raises(TypeError, match=r"Mamba2Config.ssm_state_dtype: expected a DType, got"):
        mamba.ssm_state_dtype = True
    model = specstate.ModelConfig.gated_delta_net(1, gdn)
    with pytest.raises(TypeError, match=r"ModelConfig.kind: expected a LayerKind, got int"):
        model.kind = 2
    assert model.kind == specstate.LayerKind.GATED_DELTA_NET
    with pytest.raises(TypeError, match=r"incompatible function arguments"):
        specstate.default_replay_ring(True, 4)
    # The options' and configs' constructors name the field, as their setters do.
    for field, bad, got in (("strategy", True, "bool"), ("backend", 1, "int"),
                            ("conv_layout", 0, "int"), ("ssm_layout", None, "NoneType")):
        with pytest.raises(TypeError, match=rf"^PoolOptions.{field}: expected a \w+, got {got}$"):
            specstate.PoolOptions(**{field: bad})
    assert specstate.PoolOptions(strategy=specstate.Strategy.REPLAY).strategy == specstate.Strategy.REPLAY
    with pytest.raises(TypeError, match=r"^GdnConfig.act_dtype: expected a DType, got int"):
        specstate.GdnConfig(act_dtype=0)
    with pytest.raises(TypeError, match=r"^KdaConfig.ssm_state_dtype: expected a DType, got int"):
        specstate.KdaConfig(ssm_state_dtype=1)
    assert specstate.default_replay_ring(specstate.LayerKind.MAMBA2, 4) > 0


@pytest.mark.parametrize("make, name", [
    (lambda a: specstate.GdnInputs(a, a, None), "inputs.b"),
    (lambda a: specstate.KdaInputs(a, None, a), "inputs.g"),
    (lambda a: specstate.Mamba2Inputs(None, a), "inputs.xBC"),
    (lambda a: specstate.GdnOutputs(None), "outputs.core_out"),
    (lambda a: specstate.Mamba2Outputs(None), "outputs.y"),
    (lambda a: specstate.GdnWeights(a, None, a), "weights.A_log"),
    (lambda a: specstate.KdaWeights(a, a, None), "weights.dt_bias"),
    (lambda a: specstate.Mamba2Weights(None, a, a), "weights.conv_weight"),
])
def test_none_for_a_required_array_is_named_by_the_constructors(make, name):
    """The constructors refused None for a required array with nanobind's signature error
    ("incompatible function arguments"), where the field's setter named it."""
    with pytest.raises(TypeError, match=rf"{name}: None is not an array"):
        make(f32(4, 4))


def test_vllm_layout_options_names_a_wrong_argument():
    """layout_options(None, config) gave nanobind's signature error of the private
    _vllm_layout_options."""
    cfg = specstate.ModelConfig.gated_delta_net(1, specstate.GdnConfig())
    with pytest.raises(TypeError, match=r"vllm.layout_options: options: expected a PoolOptions, "
                                        r"got NoneType"):
        specstate.vllm.layout_options(None, cfg)
    with pytest.raises(TypeError, match=r"vllm.layout_options: config: expected a ModelConfig"):
        specstate.vllm.layout_options(specstate.PoolOptions(), "qwen")
    opts = specstate.vllm.layout_options(specstate.PoolOptions(), cfg)
    assert opts.conv_layout == specstate.ConvLayout.CHANNELS_LAST


@pytest.mark.parametrize("function", ["conv_shape", "recurrent_shape"])
def test_vllm_shapes_name_a_wrong_argument(function):
    """conv_shape(None) and recurrent_shape("x") gave nanobind's signature error of the private
    _vllm_conv_shape / _vllm_recurrent_shape, as layout_options did."""
    shape_of = getattr(specstate.vllm, function)
    cfg = specstate.ModelConfig.gated_delta_net(1, specstate.GdnConfig())
    with pytest.raises(TypeError, match=rf"vllm.{function}: config: expected a ModelConfig, "
                                        r"got NoneType"):
        shape_of(None)
    with pytest.raises(TypeError, match=rf"vllm.{function}: config: expected a ModelConfig, "
                                        r"got str"):
        shape_of("x")
    with pytest.raises(TypeError, match=rf"vllm.{function}: slots: expected an int, got str"):
        shape_of(cfg, "4")
    with pytest.raises(TypeError, match=rf"vllm.{function}: slots: expected an int, got bool"):
        shape_of(cfg, True)
    assert shape_of(cfg, 3)[0] == 3
    np = pytest.importorskip("numpy")
    assert shape_of(cfg, np.int64(3))[0] == 3  # any integer type, as the binding takes


# --- The twenty-sixth session's review of the array interop (each case reproduced first) -------

import ctypes  # noqa: E402

import dlpack_fake  # noqa: E402


_keep = []


@dlpack_fake.DELETER
def _no_delete(_):
    pass


def _null_capsule(shape, code, bits):
    """A DLPack capsule claiming `shape` elements of (code, bits) at a null data pointer."""
    nd = len(shape)
    sh = (ctypes.c_int64 * nd)(*shape)
    st = (ctypes.c_int64 * nd)(*[int(np.prod(shape[i + 1:])) for i in range(nd)])
    mt = dlpack_fake.DLManagedTensor()
    mt.dl_tensor.data = None
    mt.dl_tensor.device = dlpack_fake.DLDevice(1, 0)
    mt.dl_tensor.ndim = nd
    mt.dl_tensor.dtype = dlpack_fake.DLDataType(code, bits, 1)
    mt.dl_tensor.shape = sh
    mt.dl_tensor.strides = st
    mt.deleter = _no_delete
    _keep.extend([sh, st, mt])
    return dlpack_fake.capsule(mt)


class _NullExporter:
    def __init__(self, make):
        self.make = make

    def __dlpack__(self, *args, **kwargs):
        return self.make()

    def __dlpack_device__(self):
        return (1, 0)


def _open_round(model, pool, handles, T=2, xs=None):
    pool.begin_verify(specstate.VerifyBatch(handles, window=T))
    n = len(handles) * T
    for layer, x in enumerate(xs if xs is not None else model.inputs(n)):
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(*x), model.outputs(n))


def test_arrays_claiming_elements_at_a_null_address_are_refused_by_name():
    # commit() read a null int64 [2] DLPack tensor and segfaulted; an optional output claiming
    # elements at null was taken as "no output" and skipped.
    code = r"""
import numpy as np, specstate, sys
sys.path.insert(0, %r)
from conftest import Model
from test_binding_hygiene import _null_capsule, _NullExporter, _open_round
m = Model()
pool = m.pool()
hs = [pool.acquire(), pool.acquire()]
_open_round(m, pool, hs)
for bits in (64, 32):  # an int64 array is converted, an int32 one read in place
    try:
        pool.commit(_NullExporter(lambda: _null_capsule([2], 0, bits)))
        print("accepted")
    except ValueError as e:
        print("refused:", e)
print("open:", pool.round_open())
pool.abort_round()
pool.begin_verify(specstate.VerifyBatch(hs, window=2))
try:
    out = specstate.GdnOutputs(
        core_out=np.zeros((4, m.cfg.num_v_heads, m.cfg.head_v_dim), np.float32),
        conv_out=_NullExporter(lambda: _null_capsule([4, m.cfg.conv_dim()], 2, 32)))
    pool.verify(0, m.weights[0], specstate.GdnInputs(*m.inputs(4)[0]), out)
    print("accepted")
except ValueError as e:
    print("refused:", e)
""" % os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    for line in lines[:2]:
        assert line.startswith("refused: accepted:") and "null data pointer but 2 elements" in line
    assert lines[2] == "open: True"
    assert lines[3].startswith("refused: outputs.conv_out: ") and "null data pointer" in lines[3]


def test_commit_arrays_and_lists_are_bounded_and_copied_before_they_are_read():
    m = Model()
    pool = m.pool()
    hs = [pool.acquire(), pool.acquire()]
    _open_round(m, pool, hs)
    # A broadcast array of 2^28 entries (8 bytes of memory) was converted whole (1 GiB, 0.7 s;
    # 2^40: std::bad_alloc) before its length was checked.
    t0 = time.perf_counter()
    with pytest.raises(specstate.OutOfRangeError, match=r"accepted is .*268435456 entries, more "
                                                         r"than a round's rows can be \(1048576\)"):
        pool.commit(np.broadcast_to(np.int64(1), (1 << 28,)))
    with pytest.raises(specstate.OutOfRangeError, match="more than a round's rows can be"):
        pool.commit(np.broadcast_to(np.int64(1), (1 << 40,)))
    assert time.perf_counter() - t0 < 1.0
    # A list whose items' __index__ grow it was read as it grew (without end); one that shrinks
    # it lost items. The items are copied first: exactly the two given are read.
    grown = []

    class Grow:
        calls = 0

        def __index__(self):
            Grow.calls += 1
            if Grow.calls < 1000:
                grown.append(Grow())
            return 1

    grown += [Grow(), Grow()]
    pool.commit(grown)
    assert Grow.calls == 2 and not pool.round_open()
    _open_round(m, pool, hs)
    shrunk = []

    class Shrink:
        def __index__(self):
            shrunk.clear()
            return 1

    shrunk += [Shrink(), 2]
    pool.commit(shrunk)  # both values read: [1, 2]
    assert not pool.round_open()
    # A range is a list of ints too; a generator is named with what commit takes.
    _open_round(m, pool, hs)
    with pytest.raises(TypeError, match=r"accepted values: a list of ints, or an array of any "
                                        r"integer dtype"):
        pool.commit(x for x in (1, 2))
    assert pool.round_open()
    pool.commit(range(1, 3))
    assert not pool.round_open()


def test_misaligned_integer_arrays_are_read_exactly():
    # The values of an int64 / uint16 array at an odd address were read by typed loads
    # (undefined; right on x86 by luck): read byte-exactly now, and committed as given.
    m = Model()
    xs = m.inputs(4)
    ref = m.pool()
    _open_round(m, ref, [ref.acquire(), ref.acquire()], xs=xs)
    ref.commit([2, 1])
    want = states(ref, m.layers)
    for dtype in (np.int64, np.uint16, np.int16, np.uint64):
        pool = m.pool()
        _open_round(m, pool, [pool.acquire(), pool.acquire()], xs=xs)
        odd = np.frombuffer(b"\0" + np.array([2, 1], dtype).tobytes(), dtype, offset=1)
        assert odd.ctypes.data % 2 == 1
        pool.commit(odd)
        got = states(pool, m.layers)
        assert any(np.any(c) for c, _ in got)
        for (gc, gs), (wc, ws) in zip(got, want):
            assert np.array_equal(gc, wc) and np.array_equal(gs, ws), dtype


@pytest.mark.parametrize("call", [
    lambda m, pool, hs: pool.commit([np.array([1]), 1]),
    lambda m, pool, hs: specstate.VerifyBatch(hs, window=2, lengths=np.array([[1], [2]])),
    lambda m, pool, hs: specstate.VerifyBatch(hs, window=2, parents=[np.array([0, 1])]),
    lambda m, pool, hs: specstate.VerifyBatch(hs, window=np.array([4, 4])),
    lambda m, pool, hs: specstate.PoolOptions(num_slots=np.array([4, 4])),
    lambda m, pool, hs: specstate.accept_greedy_chain([np.array([1, 2])], [1]),
])
def test_an_array_where_an_int_is_expected_is_named(call):
    # Each raised numpy's "only integer scalar arrays can be converted to a scalar index",
    # naming no argument.
    m = Model()
    pool = m.pool()
    hs = [pool.acquire(), pool.acquire()]
    try:
        _open_round(m, pool, hs)
        call(m, pool, hs)
    except TypeError as e:
        assert "expected an int, got ndarray" in str(e) or "got numpy.ndarray" in str(e), str(e)
        assert "scalar index" not in str(e)
    else:
        pytest.fail("an ndarray was taken as an int")


def test_caller_owned_state_takes_any_sequence_of_arrays():
    # committed_conv / committed_ssm took lists only; a tuple gave nanobind's unnamed
    # "incompatible function arguments".
    m = Model()
    opts = specstate.PoolOptions(num_slots=2, max_rows=2, max_window=2)
    L, c, w = m.layers, m.cfg.conv_dim(), m.cfg.conv_width
    hv, v, k = m.cfg.num_v_heads, m.cfg.head_v_dim, m.cfg.head_k_dim
    conv = np.zeros((L, 2, c, w - 1), np.float32)
    ssm = np.zeros((L, 2, hv, v, k), np.float32)
    pool = specstate.StatePool(m.config, opts, committed_conv=tuple(conv[l] for l in range(L)),
                               committed_ssm=tuple(ssm[l] for l in range(L)))
    h = pool.acquire()
    pool.prefill(0, h, m.weights[0], specstate.GdnInputs(*m.inputs(3)[0]), m.outputs(3))
    pool.materialize()
    assert np.any(ssm[0])  # the pool works in the caller's arrays
    with pytest.raises(TypeError, match="committed_conv: expected a sequence of arrays"):
        specstate.StatePool(m.config, opts, committed_conv=conv,
                            committed_ssm=[ssm[l] for l in range(L)])
    with pytest.raises(TypeError, match="committed_ssm: expected a sequence of arrays"):
        specstate.StatePool(m.config, opts, committed_conv=[conv[l] for l in range(L)],
                            committed_ssm=None)
    # More arrays than layers: refused before any item is copied (range(2**26) was copied to a
    # tuple of 2^26 ints first, about 2.5 GB, then refused item by item).
    for name in ("committed_conv", "committed_ssm"):
        args = dict(committed_conv=[conv[l] for l in range(L)],
                    committed_ssm=[ssm[l] for l in range(L)])
        args[name] = range(2**26)
        t0 = time.perf_counter()
        with pytest.raises(specstate.OutOfRangeError,
                           match=f"{name}: 67108864 items, at most {L + 1}"):
            specstate.StatePool(m.config, opts, **args)
        assert time.perf_counter() - t0 < 1.0
    # One too many gets the count error one too few gets (it said "at most L" and not why).
    for extra in (1, -1):
        with pytest.raises(specstate.InvalidArgumentError, match=r"config\.num_layers"):
            specstate.StatePool(m.config, opts, committed_conv=[conv[0]] * (L + extra),
                                committed_ssm=[ssm[l] for l in range(L)])
    with pytest.raises(specstate.OutOfRangeError, match=f"committed_conv: {L + 2} items, at most {L + 1}"):
        specstate.StatePool(m.config, opts, committed_conv=[conv[0]] * (L + 2),
                            committed_ssm=[ssm[l] for l in range(L)])


def test_handle_lists_are_bounded_and_named_before_anything_is_reserved():
    """The handle lists reserved len() handles before reading any: range(10**12) ended in a
    MemoryError (std::bad_alloc) naming nothing, and VerifyBatch.rows (a def_rw field) aborted the
    interpreter for a long list of None and named neither field nor value for [1]."""
    model = Model(layers=1)
    pool = specstate.StatePool(model.config, specstate.PoolOptions(num_slots=2))
    h = pool.acquire()
    w, out = model.weights[0], model.outputs(1)
    inp = specstate.GdnInputs(*model.inputs(1)[0])
    for call, name in [(lambda: pool.decode(0, range(10**12), w, inp, out), "rows"),
                       (lambda: pool.materialize(range(10**12)), "handles"),
                       (lambda: specstate.VerifyBatch(range(10**12)), "VerifyBatch.rows")]:
        with pytest.raises(specstate.OutOfRangeError, match=rf"{name}: 1000000000000 items, at most"):
            call()
    # An array of slot indices (a likely mistake) is refused at its first item, before the
    # others are made into Python objects.
    t0 = time.monotonic()
    with pytest.raises(TypeError, match=r"^handles\[0\]: expected a SlotHandle.*slot index"):
        pool.materialize(np.broadcast_to(np.int64(3), (2**26,)))  # 8 bytes, 2^26 items
    assert time.monotonic() - t0 < 2.0
    batch = specstate.VerifyBatch([h], window=2)
    with pytest.raises(TypeError, match=r"^VerifyBatch.rows\[0\]: expected a SlotHandle.*slot index"):
        batch.rows = [1]
    with pytest.raises(specstate.OutOfRangeError, match=r"VerifyBatch.rows: \d+ items, at most"):
        batch.rows = range(2**26 + 1)
    with pytest.raises(TypeError, match=r"^VerifyBatch.rows: expected a sequence of SlotHandle"):
        batch.rows = b"ab"
    assert list(batch.rows) == [h]  # nothing changed
    batch.rows = (h,)
    assert list(batch.rows) == [h]
    builder = specstate.VerifyBatchBuilder()
    with pytest.raises(TypeError, match=r"^VerifyBatchBuilder.add: handle: expected a SlotHandle"):
        builder.add(1, specstate.Window.chain(2))
    with pytest.raises(TypeError, match=r"^VerifyBatchBuilder.add: window: expected a Window, got int"):
        builder.add(h, 2)
    assert builder.size() == 0
    assert builder.add(h, specstate.Window.chain(2)) == 0


def test_bool_window_and_text_fields_name_what_they_refuse_and_return_copies():
    """def_rw fields said only "(): incompatible function arguments" for a wrong type (a bool
    field given 1, a Window field given 4) and refused np.bool_; a Window read from
    TraceRecord.window / TraceShape.window was a reference into the object: assigning the field
    changed the Window the caller held, and one held in a set could no longer be found."""
    for cls, fields in ((specstate.GdnConfig, ["conv_bias"]), (specstate.KdaConfig, ["conv_bias"]),
                        (specstate.Mamba2Config, ["conv_bias", "d_skip", "gate"])):
        config = cls()
        for field in fields:
            before = getattr(config, field)
            for bad, got in ((1, "int"), (None, "NoneType"), ("yes", "str")):
                with pytest.raises(TypeError, match=rf"^{cls.__name__}.{field}: expected a bool, got {got}"):
                    setattr(config, field, bad)
            assert getattr(config, field) == before
            setattr(config, field, np.bool_(not before))
            assert getattr(config, field) is (not before)
            setattr(config, field, before)
            assert getattr(config, field) is before
            # The constructor's keyword takes what the setter takes and names what it refuses
            # (a plain bool parameter refused np.bool_ and named only the whole signature).
            assert getattr(cls(**{field: np.bool_(not before)}), field) is (not before)
            for bad, got in ((1, "int"), (None, "NoneType"), ("yes", "str")):
                with pytest.raises(TypeError, match=rf"^{cls.__name__}.{field}: expected a bool, got {got}"):
                    cls(**{field: bad})
        for field in ("act_dtype", "conv_state_dtype", "ssm_state_dtype"):
            assert getattr(cls(**{field: specstate.DType.F32}), field) == specstate.DType.F32
            for bad, got in ((1, "int"), (True, "bool"), ("f32", "str")):
                with pytest.raises(TypeError, match=rf"^{cls.__name__}.{field}: expected a DType, got {got}"):
                    cls(**{field: bad})
    tree = specstate.Window.from_parents([-1, 0, 0])
    for cls in (specstate.TraceRecord, specstate.TraceShape):
        obj = cls()
        obj.window = tree
        held = obj.window
        seen = {held}
        obj.window = specstate.Window.chain(4)
        assert held == tree and tree in seen and held in seen
        assert obj.window == specstate.Window.chain(4)
        with pytest.raises(TypeError, match=rf"^{cls.__name__}.window: expected a Window, got int"):
            obj.window = 4
        assert obj.window == specstate.Window.chain(4)
    trace = specstate.Trace()
    with pytest.raises(TypeError, match=r"^Trace.meta_json: expected a str, got int"):
        trace.meta_json = 1
    trace.meta_json = '{"a": 1}'
    assert trace.meta_json == '{"a": 1}'


def test_enum_arguments_of_functions_refuse_ints_and_bools():
    """conv_layout_name(1), ssm_layout_name(True), status_name(True), set_log_level(True),
    pool.workspace(True, 0) and VerifyBatchBuilder(packing=True) converted the int or bool to an
    enum (packing=True built a VARIABLE batch)."""
    level = specstate.log_level()
    for call in (lambda: specstate.conv_layout_name(1), lambda: specstate.ssm_layout_name(True),
                 lambda: specstate.status_name(True), lambda: specstate.set_log_level(True),
                 lambda: specstate.VerifyBatchBuilder(packing=True),
                 lambda: specstate.VerifyBatchBuilder(packing=1)):
        with pytest.raises(TypeError, match=r"incompatible function arguments"):
            call()
    assert specstate.log_level() == level
    model = Model(layers=1)
    pool = model.pool()
    with pytest.raises(TypeError, match=r"incompatible function arguments"):
        pool.workspace(True, 0)
    assert specstate.conv_layout_name(specstate.ConvLayout.CHANNELS_LAST) == "channels_last"
    assert specstate.VerifyBatchBuilder(packing=specstate.Packing.VARIABLE) is not None


def test_a_weights_subclass_that_skips_init_is_named_and_a_released_memoryview_too():
    """A GdnWeights subclass whose __init__ does not call super().__init__() gave
    "RuntimeError: std::bad_cast"; commit() of a released memoryview gave the memoryview's own
    ValueError, naming nothing."""
    class Skipped(specstate.GdnWeights):
        def __init__(self):
            pass

    model = Model(layers=1)
    pool = model.pool()
    h = pool.acquire()
    inp = specstate.GdnInputs(*model.inputs(1)[0])
    with pytest.raises(TypeError, match=r"^weights: the Skipped object is not initialized"):
        pool.prefill(0, h, Skipped(), inp, model.outputs(1))
    view = memoryview(np.array([2], np.int64))
    view.release()
    with pytest.raises(ValueError, match=r"accepted: the memoryview is released"):
        pool.commit(view)
