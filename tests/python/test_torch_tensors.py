"""torch tensors on the CPU as an engine passes them (the torch-interop review of the thirty-first
session): memory that torch moves under a held tensor, tensors that require grad, torch integer
tensors where integer lists are taken, a `with` block's exception over close()'s. Skipped where
torch is not installed (the GPU machine has it: python/gpu_check.sh)."""

import numpy as np
import pytest

import specstate
from specstate import DType

torch = pytest.importorskip("torch", reason="torch is not installed (python/gpu_check.sh has it)")

CFG = specstate.GdnConfig(num_k_heads=2, num_v_heads=4, head_k_dim=8, head_v_dim=16,
                          act_dtype=DType.F32, conv_state_dtype=DType.F32)
MODEL = specstate.ModelConfig.gated_delta_net(1, CFG)
C, HV, V, W = CFG.conv_dim(), CFG.num_v_heads, CFG.head_v_dim, CFG.conv_width


def tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    weights = specstate.GdnWeights(conv_weight=torch.randn(C, W, generator=g),
                                   A_log=torch.randn(HV, generator=g),
                                   dt_bias=torch.randn(HV, generator=g))
    inputs = specstate.GdnInputs(torch.randn(5, C, generator=g), torch.randn(5, HV, generator=g),
                                 torch.randn(5, HV, generator=g))
    return weights, inputs


def test_a_weight_whose_memory_moved_is_refused_naming_it_and_the_call_changes_nothing():
    weights, inputs = tensors()
    pool = specstate.StatePool(MODEL, specstate.PoolOptions(num_slots=2, max_window=4))
    h = pool.acquire()
    out = torch.zeros(5, HV, V)
    pool.prefill(0, h, weights, inputs, specstate.GdnOutputs(core_out=out))
    state = torch.from_dlpack(pool.ssm_state(0, h)).clone()
    assert state.abs().sum() > 0
    weights.A_log.share_memory_()  # new memory: the imported address is freed
    out2 = torch.full((5, HV, V), 7.0)
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"weights\.A_log: the torch tensor.s memory moved after it was taken.*set the field again"):
        pool.prefill(0, h, weights, inputs, specstate.GdnOutputs(core_out=out2))
    assert torch.equal(torch.from_dlpack(pool.ssm_state(0, h)), state)  # nothing written
    assert bool((out2 == 7.0).all())
    weights.A_log = weights.A_log  # set again: taken at its new address
    pool.prefill(0, h, weights, inputs, specstate.GdnOutputs(core_out=out2))
    # A parameter's `.data =` (what Module.to / .half / .float do) moves an output the same way.
    out3 = torch.zeros(5, HV, V)
    outs = specstate.GdnOutputs(core_out=out3)
    out3.data = torch.zeros(5, HV, V)
    with pytest.raises(specstate.InvalidArgumentError, match=r"outputs\.core_out: .* moved"):
        pool.prefill(0, h, weights, inputs, outs)


def vllm_pool(strategy=specstate.Strategy.SNAPSHOT, seed=1):
    weights, inputs = tensors(seed)
    conv = torch.zeros(specstate.vllm.conv_shape(MODEL, 2))
    rec = torch.zeros(specstate.vllm.recurrent_shape(MODEL, 2))
    pool = specstate.vllm.state_pool(
        MODEL, specstate.PoolOptions(num_slots=2, max_window=4, strategy=strategy), [conv], [rec])
    h = pool.acquire()
    pool.prefill(0, h, weights, inputs, specstate.GdnOutputs(core_out=torch.zeros(5, HV, V)))
    assert rec.abs().sum() > 0 and conv.abs().sum() > 0
    return pool, h, weights, inputs, conv, rec


def test_caller_owned_committed_tensors_that_moved_are_refused_before_anything_is_written():
    pool, h, weights, inputs, conv, rec = vllm_pool()
    rec.share_memory_()
    for call in (lambda: pool.prefill(0, h, weights, inputs,
                                      specstate.GdnOutputs(core_out=torch.zeros(5, HV, V))),
                 lambda: pool.materialize(), lambda: pool.export_slot(h)):
        with pytest.raises(specstate.InvalidArgumentError,
                           match=r"committed_ssm\[0\]: the torch tensor's memory moved.*cannot "
                                 r"follow it"):
            call()
    # close() ends the pool without writing into the moved tensor's old memory, and says so.
    with pytest.raises(specstate.InvalidArgumentError,
                       match=r"StatePool.close\(\): committed_ssm\[0\]: .* closed without "
                             r"writing"):
        pool.close()
    assert pool.closed


def test_a_conv_view_whose_tensor_moved_is_refused():
    # vllm.state_pool holds the conv states as transposed views: `conv.data = ...` leaves the
    # view on the old memory, alive but no longer the caller's tensor.
    for move in (lambda t: setattr(t, "data", torch.zeros_like(t)),
                 lambda t: t.set_(torch.zeros_like(t))):
        pool, h, weights, inputs, conv, rec = vllm_pool()
        move(conv)
        with pytest.raises(specstate.InvalidArgumentError,
                           match=r"committed_conv\[0\]: the tensor this torch view was taken "
                                 r"from moved to new memory"):
            pool.prefill(0, h, weights, inputs,
                         specstate.GdnOutputs(core_out=torch.zeros(5, HV, V)))


def test_a_replay_pool_over_a_moved_tensor_is_dropped_without_writing_it():
    # Its destructor materialized the deferred steps into the freed memory (a crash), also after a
    # with block's exception left it open.
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import gc, torch, specstate
        import test_torch_tensors as t
        for close in (False, True):
            pool, h, weights, inputs, conv, rec = t.vllm_pool(specstate.Strategy.REPLAY)
            batch = specstate.VerifyBatch([h], window=4)
            pool.begin_verify(batch)
            pool.verify(0, weights, specstate.GdnInputs(*(x[:4] for x in (inputs.mixed_qkv,
                        inputs.a, inputs.b))), specstate.GdnOutputs(core_out=torch.zeros(4, 4, 16)))
            pool.commit([3])
            rec.share_memory_()
            junk = [torch.randn(4096) for _ in range(64)]
            try:
                with pool:
                    raise KeyError("the block's error")
            except KeyError:
                pass
            if close:
                try:
                    pool.close()
                except specstate.InvalidArgumentError:
                    pass
            del pool
            gc.collect()
        print("dropped")
    """)
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__)] + [p for p in sys.path if p]))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0 and "dropped" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("field", ["core_out", "conv_out"])
def test_outputs_that_require_grad_are_refused_naming_them(field):
    weights, inputs = tensors(2)
    pool = specstate.StatePool(MODEL, specstate.PoolOptions(num_slots=2, max_window=4))
    h = pool.acquire()
    shapes = {"core_out": (5, HV, V), "conv_out": (5, C)}
    kwargs = {"core_out": torch.zeros(5, HV, V)}
    kwargs[field] = torch.zeros(shapes[field], requires_grad=True)
    with pytest.raises(ValueError, match=f"outputs.{field}: a torch tensor that requires grad"):
        specstate.GdnOutputs(**kwargs)
    with pytest.raises(ValueError, match="dst: a torch tensor that requires grad"):
        pool.export_slot(h, torch.zeros(pool.slot_state_bytes() // 4, requires_grad=True))
    # Inputs that require grad are read as they are (as .detach() would give them).
    g_in = specstate.GdnInputs(inputs.mixed_qkv.clone().requires_grad_(),
                               inputs.a, inputs.b)
    out_a, out_b = torch.zeros(5, HV, V), torch.zeros(5, HV, V)
    pool.prefill(0, h, weights, g_in, specstate.GdnOutputs(core_out=out_a))
    h2 = pool.acquire()
    pool.prefill(0, h2, weights, inputs, specstate.GdnOutputs(core_out=out_b))
    assert torch.equal(out_a, out_b) and out_a.abs().sum() > 0


def test_torch_integer_tensors_are_taken_where_integer_lists_are():
    pool = specstate.StatePool(MODEL, specstate.PoolOptions(num_slots=4, max_rows=4,
                                                            max_window=4))
    h, g = pool.acquire(), pool.acquire()
    batch = specstate.VerifyBatch([h, g], window=4, lengths=torch.tensor([4, 2]))
    assert list(batch.lengths) == [4, 2]
    tree = specstate.Window.from_parents(torch.tensor([-1, 0, 0, 1], dtype=torch.int32))
    assert tree.describe() == specstate.Window.from_parents([-1, 0, 0, 1]).describe()
    acc = specstate.accept_greedy_chain(torch.tensor([1, 2, 3]), torch.tensor([2, 3, 9]))
    assert acc.accepted_length() == acc.accepted_length()  # taken
    assert acc.accepted_length() == specstate.accept_greedy_chain([1, 2, 3],
                                                                  [2, 3, 9]).accepted_length()
    with pytest.raises(TypeError, match="a torch tensor of 2 dimensions"):
        specstate.VerifyBatch([h], window=4, lengths=torch.tensor([[4]]))
    with pytest.raises(TypeError, match=r"parents\[0\]: expected an int, got float"):
        specstate.Window.from_parents(torch.tensor([-1.0, 0.0]))


def test_a_with_blocks_exception_is_not_replaced_by_close_refusing_a_live_view():
    class BlockError(Exception):
        pass

    with pytest.raises(BlockError):
        with specstate.StatePool(MODEL, specstate.PoolOptions(num_slots=2)) as pool:
            view = torch.from_dlpack(pool.ssm_state(0))
            raise BlockError("the block's own error")
    assert not pool.closed  # the view kept it open
    del view
    pool.close()
    assert pool.closed


def test_cu_seqlens_of_another_dtype_names_int32():
    pool = specstate.StatePool(MODEL, specstate.PoolOptions(num_slots=2, max_window=4))
    h = pool.acquire()
    with pytest.raises(TypeError, match=r"batch\.cu_seqlens: .*\(cu_seqlens is int32\)"):
        pool.begin_verify(specstate.VerifyBatch([h], window=4),
                          cu_seqlens=np.array([0, 4], dtype=np.int64).astype(np.float64))


def test_a_view_whose_base_moved_before_it_was_taken_is_no_move():
    # What the caller passes is what it holds: a base that got new memory earlier (a review's
    # false alarm, refused at every call and again after "set the field again").
    weights, inputs = tensors(3)
    pool = specstate.StatePool(MODEL, specstate.PoolOptions(num_slots=2, max_window=4))
    h = pool.acquire()
    base = torch.randn(2, HV)
    view = base[1]
    base.data = torch.randn(2, HV)
    w = specstate.GdnWeights(conv_weight=weights.conv_weight, A_log=view,
                             dt_bias=weights.dt_bias)
    pool.prefill(0, h, w, inputs, specstate.GdnOutputs(core_out=torch.zeros(5, HV, V)))
    # A field's view whose base moves after it was set keeps its own memory: used as it is (one
    # address query a field and call).
    base.data = torch.randn(2, HV)
    pool.prefill(0, h, w, inputs, specstate.GdnOutputs(core_out=torch.zeros(5, HV, V)))
    raw = torch.zeros(2, *specstate.vllm.recurrent_shape(MODEL, 2))
    rec = raw[0]
    raw.data = torch.zeros_like(raw)
    conv = torch.zeros(specstate.vllm.conv_shape(MODEL, 2))
    other = specstate.vllm.state_pool(MODEL, specstate.PoolOptions(num_slots=2, max_window=4),
                                      [conv], [rec])
    other.acquire()
    other.close()


def test_a_pool_dropped_while_an_exception_propagates_keeps_it():
    # The destructor's moved-memory query ran Python with the caller's exception pending: a crash
    # (an argument built before another argument raised), or SystemError in its place.
    import os
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import torch, specstate
        import test_torch_tensors as t
        def make():
            conv = torch.zeros(specstate.vllm.conv_shape(t.MODEL, 2))
            rec = torch.zeros(specstate.vllm.recurrent_shape(t.MODEL, 2))
            return specstate.vllm.state_pool(
                t.MODEL, specstate.PoolOptions(num_slots=2, max_window=4), [conv], [rec])
        def boom():
            raise KeyError("the caller's error")
        def use(pool, x):
            pass
        try:
            use(make(), boom())
        except KeyError as e:
            print("caught", e)
        try:
            [make(), make(), boom()]
        except KeyError as e:
            print("caught", e)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__)] + [p for p in sys.path if p]))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0 and run.stdout.count("caught") == 2, run.stdout + run.stderr

