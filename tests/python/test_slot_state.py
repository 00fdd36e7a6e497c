"""One slot's committed state through the Python package (CPU backend; the CUDA cases are in
test_gpu.py): per-slot views (conv_state / ssm_state with a handle) and export_slot /
import_slot through buffers (a fresh array, NumPy arrays of any dtype, bytes-like objects) and
files. Buffers are always sized with pool.slot_state_bytes(): the byte layout is the C++
library's and is not assumed here."""

import ctypes
import gc
import pathlib

import numpy as np
import pytest

import dlpack_fake
import specstate
from specstate import DType, Strategy
from conftest import BF16, Model, bits
from test_mamba2 import mamba_model

STRATEGIES = [Strategy.SNAPSHOT, Strategy.REPLAY]
T = 3


def advance(pool, model, handles, seed):
    """A prefill of each handle, then one round accepting a different length per row (under
    replay the rows' accepted steps stay pending)."""
    model.rng = np.random.default_rng(seed)
    rng = np.random.default_rng(seed + 1000)
    for h in handles:
        for layer, (x, a, b) in enumerate(model.inputs(2)):
            pool.prefill(layer, h, model.weights[layer], specstate.GdnInputs(x, a, b),
                         model.outputs(2))
    pool.begin_verify(specstate.VerifyBatch(list(handles), window=T))
    for layer, (x, a, b) in enumerate(model.inputs(len(handles) * T)):
        pool.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b),
                    model.outputs(len(handles) * T))
    pool.commit([int(v) for v in rng.integers(1, T + 1, len(handles))])


def slot_views(pool, layers, h):
    """Copies of one slot's per-layer (conv, ssm) views, as raw bytes."""
    return [(bits(specstate.to_numpy(pool.conv_state(l, h))).copy(),
             bits(specstate.to_numpy(pool.ssm_state(l, h))).copy()) for l in range(layers)]


def same_state(a, b):
    return all(np.array_equal(c0, c1) and np.array_equal(s0, s1)
               for (c0, s0), (c1, s1) in zip(a, b))


def twin_pools(strategy, act=DType.F32, slots=4):
    """The same model's pool twice, driven identically."""
    model = Model(act=act, seed=3)
    return model, model.pool(strategy, slots=slots), model.pool(Strategy.SNAPSHOT, slots=slots)


# --- per-slot views -----------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_per_slot_views_are_the_slots_rows_of_the_layer_views(strategy):
    model, pool, _ = twin_pools(strategy)
    hs = [pool.acquire() for _ in range(3)]
    advance(pool, model, hs, seed=1)
    cfg = model.cfg
    for h in hs:
        for layer in range(model.layers):
            c = np.from_dlpack(pool.conv_state(layer, h))
            s = np.from_dlpack(pool.ssm_state(layer, h))
            assert c.shape == (cfg.conv_dim(), cfg.conv_width - 1)
            assert s.shape == (cfg.num_v_heads, cfg.head_v_dim, cfg.head_k_dim)
            assert c.dtype == s.dtype == np.float32
            whole_c = np.from_dlpack(pool.conv_state(layer))
            whole_s = np.from_dlpack(pool.ssm_state(layer))
            i = pool.slot_index(h)
            assert np.shares_memory(c, whole_c) and np.shares_memory(s, whole_s)  # zero-copy
            assert np.array_equal(c, whole_c[i]) and np.array_equal(s, whole_s[i])
            assert np.any(s != 0)


def test_per_slot_views_materialize_their_slot_under_replay():
    """Read first, before any whole-layer view: a replay pool's per-slot views equal a snapshot
    pool's after the same calls (bit-identical strategies), so the view ran the pending steps."""
    model, replay, snapshot = twin_pools(Strategy.REPLAY)
    hr = [replay.acquire() for _ in range(2)]
    hs = [snapshot.acquire() for _ in range(2)]
    advance(replay, model, hr, seed=2)
    advance(snapshot, model, hs, seed=2)
    for r, s in zip(hr, hs):
        assert same_state(slot_views(replay, model.layers, r),
                          slot_views(snapshot, model.layers, s))


def test_per_slot_views_are_writable_and_keep_the_pool_alive():
    model = Model()
    pool = model.pool()
    h = pool.acquire()
    advance(pool, model, [h], seed=4)
    view = np.from_dlpack(pool.ssm_state(1, h))
    view[0, 0, 0] = 42.0  # the pool's memory
    assert np.from_dlpack(pool.ssm_state(1))[pool.slot_index(h), 0, 0, 0] == 42.0
    expect = view.copy()
    del pool
    gc.collect()
    assert np.array_equal(view, expect)


def test_per_slot_views_bf16_and_mamba2():
    model = Model(act=DType.BF16)
    pool = model.pool()
    h = pool.acquire()
    advance(pool, model, [h], seed=5)
    conv = specstate.to_numpy(pool.conv_state(0, h))
    assert conv.dtype.name == "bfloat16"
    assert conv.shape == (model.cfg.conv_dim(), model.cfg.conv_width - 1)

    config, weights, inputs, outputs = mamba_model()
    mpool = specstate.StatePool(config, specstate.PoolOptions(num_slots=2, max_window=4))
    mpool.acquire()
    g = mpool.acquire()
    for layer, x in enumerate(inputs(3)):
        mpool.prefill(layer, g, weights[layer], x, outputs(3))
    m = config.mamba
    s = np.from_dlpack(mpool.ssm_state(1, g))
    assert s.shape == (m.num_heads, m.head_dim, m.d_state) and np.any(s != 0)
    assert np.array_equal(s, np.from_dlpack(mpool.ssm_state(1))[1])
    assert np.from_dlpack(mpool.conv_state(1, g)).shape == (m.conv_dim(), m.conv_width - 1)


def test_per_slot_views_take_a_stream_argument():
    """`stream` still works where it did (ignored by a CPU pool, checked for its type)."""
    model = Model()
    pool = model.pool()
    h = pool.acquire()
    for call in (pool.conv_state, pool.ssm_state):
        whole = np.from_dlpack(call(0, stream=0))
        assert np.array_equal(np.from_dlpack(call(0, h, stream=0)), whole[pool.slot_index(h)])
        assert np.array_equal(np.from_dlpack(call(0, h, 0)), whole[pool.slot_index(h)])
        assert np.from_dlpack(call(0, None, None)).shape == whole.shape
        assert np.from_dlpack(call(np.int64(1), handle=h)).shape == whole.shape[1:]
        with pytest.raises(TypeError, match="stream: expected a CUDA stream"):
            call(0, h, stream="fast")


def test_per_slot_view_errors_name_the_argument():
    model = Model()
    pool, other = model.pool(), model.pool()
    h = pool.acquire()
    foreign = other.acquire()

    class Stream:
        cuda_stream = 0

    for call in (pool.conv_state, pool.ssm_state):
        with pytest.raises(TypeError, match=r"handle: expected a SlotHandle .* got int \(a slot "
                                            r"index\?"):
            call(0, 1)
        with pytest.raises(TypeError, match=r"handle: .* got \S*Stream \(a stream\? pass it as "
                                            r"stream="):
            call(0, Stream())
        with pytest.raises(TypeError, match="handle: expected a SlotHandle .* got str"):
            call(0, "slot 0")
        with pytest.raises(TypeError, match="layer: expected an int, got str"):
            call("0", h)
        with pytest.raises(TypeError, match="layer: expected an int, got float"):
            call(0.0)
        with pytest.raises(specstate.OutOfRangeError, match="layer = 2"):
            call(2, h)
        with pytest.raises(specstate.OutOfRangeError, match="layer"):
            call(2**40, h)
        with pytest.raises(specstate.FailedPreconditionError, match="handle"):
            call(0, foreign)
    pool.release(h)
    with pytest.raises(specstate.FailedPreconditionError, match="handle"):
        pool.ssm_state(0, h)  # stale


# --- export / import through buffers ------------------------------------------------------------

def test_export_slot_returns_a_fresh_host_array():
    model = Model()
    pool = model.pool(Strategy.REPLAY)
    h = pool.acquire()
    advance(pool, model, [h], seed=6)
    a, b = pool.export_slot(h), pool.export_slot(h)
    assert isinstance(a, np.ndarray) and a.dtype == np.uint8
    assert a.shape == (pool.slot_state_bytes(),)
    assert a.flags.writeable and a.flags.c_contiguous
    assert not np.shares_memory(a, b) and np.array_equal(a, b) and np.any(a != 0)
    buf = np.zeros(pool.slot_state_bytes(), np.uint8)
    assert pool.export_slot(h, buf) is None
    assert np.array_equal(buf, a)
    del pool
    gc.collect()
    assert np.array_equal(a, b)  # the array owns its memory


@pytest.mark.parametrize("src_strategy", STRATEGIES, ids=lambda s: "from_" + s.name)
@pytest.mark.parametrize("dst_strategy", STRATEGIES, ids=lambda s: "to_" + s.name)
def test_buffer_round_trip_across_strategies(src_strategy, dst_strategy):
    """A replay slot with pending steps exported, imported into another pool: the same state, and
    the same state again after one more identical round on both."""
    model = Model(act=DType.BF16, seed=7)
    src, dst = model.pool(src_strategy), model.pool(dst_strategy)
    h = src.acquire()
    dst.acquire()
    g = dst.acquire()  # another slot index: the bytes carry no slot
    advance(src, model, [h], seed=8)
    dst.import_slot(g, src.export_slot(h))
    assert same_state(slot_views(dst, model.layers, g), slot_views(src, model.layers, h))
    for pool, handle in ((src, h), (dst, g)):
        advance(pool, model, [handle], seed=9)
    assert same_state(slot_views(dst, model.layers, g), slot_views(src, model.layers, h))


def test_buffer_and_file_carry_the_same_bytes(tmp_path):
    model = Model(seed=10)
    a, b = model.pool(Strategy.REPLAY), model.pool()
    h, g = a.acquire(), b.acquire()
    advance(a, model, [h], seed=11)
    path = tmp_path / "slot.safetensors"
    a.export_slot(h, path)  # os.PathLike
    b.import_slot(g, str(path))
    assert np.array_equal(b.export_slot(g), a.export_slot(h))
    b.reset(g)
    b.import_slot(g, a.export_slot(h))
    b.export_slot(g, path=str(tmp_path / "again.safetensors"))  # the keyword of the file form
    c = model.pool()
    k = c.acquire()
    c.import_slot(k, path=tmp_path / "again.safetensors")
    assert same_state(slot_views(c, model.layers, k), slot_views(a, model.layers, h))


def test_buffers_of_any_dtype_shape_and_kind():
    model = Model(seed=12)
    pool = model.pool()
    h, g = pool.acquire(), pool.acquire()
    advance(pool, model, [h], seed=13)
    n = pool.slot_state_bytes()
    want = pool.export_slot(h)
    outs = [np.zeros((2, n // 2), np.uint8), np.zeros(n, np.int8), np.zeros(n // 2, BF16),
            bytearray(n), memoryview(np.zeros(n, np.uint8))]
    if n % 4 == 0:
        outs.append(np.zeros(n // 4, np.float32))
    if n % 8 == 0:
        outs.append(np.zeros((n // 8, 1), np.float64))
    for out in outs:
        pool.export_slot(h, out)
        if isinstance(out, np.ndarray):
            raw = out.view(np.uint8).ravel()
        else:
            raw = np.frombuffer(out, np.uint8)
        assert np.array_equal(raw, want), type(out)
        pool.reset(g)
        pool.import_slot(g, out)
        assert np.array_equal(pool.export_slot(g), want)
    ro = want.copy()
    ro.setflags(write=False)
    for src in (bytes(want), ro, memoryview(bytes(want))):  # inputs may be read-only
        pool.reset(g)
        pool.import_slot(g, src)
        assert np.array_equal(pool.export_slot(g), want)
    # An object array holds no bytes to import: a TypeError saying so (it pasted a traceback).
    with pytest.raises(TypeError, match="dtype object holds Python objects") as info:
        pool.import_slot(g, np.array([b"x" * 8], dtype=object))
    assert "Traceback" not in str(info.value)
    assert np.array_equal(pool.export_slot(g), want)


def test_export_writes_only_the_buffers_bytes():
    """Into an unaligned slice of a larger buffer: the bytes around it are untouched."""
    model = Model(seed=14)
    pool = model.pool()
    h = pool.acquire()
    advance(pool, model, [h], seed=15)
    n = pool.slot_state_bytes()
    big = np.full(n + 64, 0xAB, np.uint8)
    pool.export_slot(h, big[7:7 + n])
    assert np.array_equal(big[7:7 + n], pool.export_slot(h))
    assert (big[:7] == 0xAB).all() and (big[7 + n:] == 0xAB).all()
    g = pool.acquire()
    pool.import_slot(g, big[7:7 + n])
    assert same_state(slot_views(pool, model.layers, g), slot_views(pool, model.layers, h))


def test_mamba2_buffer_round_trip():
    config, weights, inputs, outputs = mamba_model()
    opts = specstate.PoolOptions(num_slots=2, max_rows=1, max_window=4, strategy=Strategy.REPLAY)
    src = specstate.StatePool(config, opts)
    dst = specstate.StatePool(config, specstate.PoolOptions(num_slots=2, max_window=4))
    h, g = src.acquire(), dst.acquire()
    src.begin_verify(specstate.VerifyBatch([h], window=4))
    for layer, x in enumerate(inputs(4)):
        src.verify(layer, weights[layer], x, outputs(4))
    src.commit([3])  # pending under replay
    buf = np.empty(src.slot_state_bytes(), np.uint8)
    src.export_slot(h, buf)
    dst.import_slot(g, buf)
    assert same_state(slot_views(dst, 2, g), slot_views(src, 2, h))
    assert any(np.any(s != 0) for _, s in slot_views(dst, 2, g))


# A DLPack tensor made by hand (dlpack_fake): the dtypes and devices NumPy cannot make (the pool
# rejects them before it reads a byte, so the pointer is never dereferenced).
class FakeDLPack:
    KDL_CPU, KDL_CUDA, KDL_ROCM = 1, 2, 10

    def __init__(self, elements, device=KDL_CPU, bits=8, lanes=1):
        self.shape = (ctypes.c_int64 * 1)(elements)
        self.t = dlpack_fake.DLManagedTensor()
        self.t.dl_tensor = dlpack_fake.DLTensor(
            data=0x10000, device=dlpack_fake.DLDevice(device, 0), ndim=1,
            dtype=dlpack_fake.DLDataType(1, bits, lanes), shape=self.shape)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        return dlpack_fake.capsule(self.t)

    def __dlpack_device__(self):
        return (self.t.dl_tensor.device.device_type, 0)


def test_buffer_errors_name_the_argument_and_change_nothing():
    model = Model(seed=16)
    pool = model.pool()
    h, g = pool.acquire(), pool.acquire()
    advance(pool, model, [h, g], seed=17)
    n = pool.slot_state_bytes()
    before = pool.export_slot(g)
    # size
    for wrong in (n - 1, n + 4, 2 * n):
        with pytest.raises(specstate.InvalidArgumentError,
                           match=rf"StatePool.export_slot: dst \(uint8\[{wrong}\] cpu\) holds "
                                 rf"{wrong} bytes, expected pool.slot_state_bytes\(\) = {n} bytes"):
            pool.export_slot(h, np.zeros(wrong, np.uint8))
        with pytest.raises(ValueError, match=rf"import_slot: src .* holds {wrong} bytes"):
            pool.import_slot(g, np.ones(wrong, np.uint8))
    with pytest.raises(ValueError, match="src: .* is not contiguous"):
        pool.import_slot(g, np.ones(2 * n, np.uint8)[::2])
    ro = np.zeros(n, np.uint8)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="dst: the array is read-only"):
        pool.export_slot(h, ro)
    with pytest.raises(ValueError, match="dst: the array is read-only"):
        pool.export_slot(h, bytes(n))
    # dtype
    with pytest.raises(TypeError, match="dst: dtype uint4 is no dtype of whole-byte scalar"):
        pool.export_slot(h, FakeDLPack(2 * n, bits=4))
    with pytest.raises(TypeError, match="src: dtype uint8x2 is no dtype of whole-byte scalar"):
        pool.import_slot(g, FakeDLPack(n // 2, lanes=2))
    # device
    with pytest.raises(specstate.InvalidArgumentError,
                       match=rf"dst \(uint8\[{n}\] cuda:0\) lives on cuda, the pool's backend is "
                             r"cpu"):
        pool.export_slot(h, FakeDLPack(n, device=FakeDLPack.KDL_CUDA))
    with pytest.raises(specstate.InvalidArgumentError, match=r"src \(uint8\[.*\] cuda:0\) lives"):
        pool.import_slot(g, FakeDLPack(n, device=FakeDLPack.KDL_CUDA))
    with pytest.raises(ValueError, match="src: device rocm is not supported"):
        pool.import_slot(g, FakeDLPack(n, device=FakeDLPack.KDL_ROCM))
    # types
    with pytest.raises(TypeError, match="dst: expected an array .* got int"):
        pool.export_slot(h, 5)
    with pytest.raises(TypeError, match="src: None is not a state"):
        pool.import_slot(g)
    with pytest.raises(TypeError, match="handle: expected a SlotHandle .* got int"):
        pool.export_slot(0)
    with pytest.raises(TypeError, match="handle: expected a SlotHandle"):
        pool.import_slot(1, before)
    with pytest.raises(TypeError, match="give dst or path, not both"):
        pool.export_slot(h, np.zeros(n, np.uint8), path="x.safetensors")
    with pytest.raises(TypeError, match="path: expected a str or os.PathLike, got int"):
        pool.import_slot(g, path=3)
    # protocol: a row of the open round cannot be imported into; a stale handle is named
    pool.begin_verify(specstate.VerifyBatch([g], window=T))
    with pytest.raises(specstate.FailedPreconditionError, match="import_slot.*handle"):
        pool.import_slot(g, pool.export_slot(h))
    pool.abort_round()
    assert np.array_equal(pool.export_slot(g), before)  # no rejected call changed a byte
    pool.release(h)
    with pytest.raises(specstate.FailedPreconditionError, match="export_slot.*handle"):
        pool.export_slot(h)
    with pytest.raises(specstate.InvalidArgumentError, match="cannot write the file"):
        pool.export_slot(g, pathlib.Path("/nonexistent_dir/x.safetensors"))
    assert np.array_equal(pool.export_slot(g), before)


def test_file_names_pass_as_the_file_system_takes_them(tmp_path):
    """Names that are no valid UTF-8 (a str with surrogate escapes, a PathLike returning bytes)
    reach the file system as their bytes (they raised RuntimeError 'std::bad_cast'); a name with
    a NUL byte is refused and the file its prefix names is neither written nor read (the export
    wrote that file)."""
    model, pool, _ = twin_pools(Strategy.REPLAY)
    h, g = pool.acquire(), pool.acquire()
    advance(pool, model, [h], seed=5)
    want = slot_views(pool, model.layers, h)

    class BytesPath:
        def __init__(self, raw):
            self.raw = raw

        def __fspath__(self):
            return self.raw

    raw = bytes(tmp_path) + b"/slot-\xff\xfe.safetensors"
    for name in (str(tmp_path) + "/slot-\udcff.safetensors", BytesPath(raw)):
        pool.export_slot(h, name)
        pool.reset(g)
        pool.import_slot(g, name)
        assert same_state(slot_views(pool, model.layers, g), want)
    assert (tmp_path / "slot-\udcff.safetensors").exists()
    prefix = tmp_path / "nul"
    before = pool.export_slot(g)
    for call in (lambda: pool.export_slot(h, str(prefix) + "\0.safetensors"),
                 lambda: pool.import_slot(g, str(prefix) + "\0.safetensors")):
        with pytest.raises(specstate.InvalidArgumentError, match=r"holds a NUL byte \(at"):
            call()
    assert not prefix.exists()
    assert np.array_equal(pool.export_slot(g), before)
