"""An engine's typed use of the package, checked by tests/python/test_import.py: run as it is,
and type-checked with `mypy --strict` where mypy is installed. `refused()` holds calls the
runtime refuses; each carries the `type: ignore` its error needs, so a stub that lets one pass
fails the check ("unused type: ignore" under --strict)."""

from __future__ import annotations

import os
import pathlib
import tempfile
from typing import Any

import numpy as np
import numpy.typing as npt

import specstate
from specstate import DLPackArray, DType


def committed_bytes(model: specstate.ModelConfig) -> int:
    # __exit__ returns None: a bool there made this a "missing return" for type checkers.
    with specstate.StatePool(model, specstate.PoolOptions(num_slots=2)) as pool:
        return pool.committed_bytes()


def main() -> None:
    L, T, n = 2, 4, 5
    layer = specstate.GdnConfig(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16,
                                conv_bias=np.bool_(False), act_dtype=DType.F32,
                                conv_state_dtype=DType.F32)
    model = specstate.ModelConfig.gated_delta_net(np.int64(L), layer)
    opts = specstate.PoolOptions(num_slots=8, max_rows=8, max_window=T,
                                 strategy=specstate.Strategy.REPLAY)
    opts.num_slots = 8
    pool = specstate.StatePool(model, opts)
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> npt.NDArray[np.float32]:
        return rng.standard_normal(shape, np.float32)

    C, HV, V, W = layer.conv_dim(), layer.num_v_heads, layer.head_v_dim, layer.conv_width
    weights = [specstate.GdnWeights(conv_weight=rand(C, W), A_log=rand(HV), dt_bias=rand(HV))
               for _ in range(L)]

    def inputs(t: int) -> specstate.GdnInputs:
        return specstate.GdnInputs(rand(t, C), rand(t, HV), rand(t, HV))

    def outputs(t: int) -> specstate.GdnOutputs:
        return specstate.GdnOutputs(core_out=np.zeros((t, HV, V), np.float32))

    h: specstate.SlotHandle = pool.acquire()
    g = pool.acquire()
    pool.prefill_batch(0, [h, g], np.array([3, 2]), weights[0], inputs(5), outputs(5))
    for li in range(1, L):
        pool.prefill(li, h, weights[li], inputs(n), outputs(n))
    batch = specstate.VerifyBatch([h], window=np.int64(T), lengths=np.array([T]))
    batch.lengths = [T]
    pool.begin_verify(batch)
    for index in np.arange(L):  # NumPy integers where an int is taken
        pool.verify(index, weights[int(index)], inputs(T), outputs(T))
    acc = specstate.accept_greedy_chain([11, 12, 13, 14], [12, 13, 99, 7])
    pool.commit([acc.accepted_length()])

    view: DLPackArray = pool.ssm_state(np.int64(0), h)
    state_now: npt.NDArray[Any] = np.from_dlpack(view)
    assert state_now.shape == (HV, V, layer.head_k_dim)
    assert specstate.to_numpy(pool.conv_state(0)).ndim == 3
    exported = pool.export_slot(h)  # an array where no dst is given
    assert exported.nbytes == pool.slot_state_bytes()
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "request.safetensors"
        pool.export_slot(h, path)
        pool.export_slot(h, path=os.fspath(path))
        pool.import_slot(g, path)
    tree = specstate.Window.from_parents(np.array([-1, 0, 0, 1]))
    first_child, next_sibling = tree.to_links()
    assert len(first_child) == len(next_sibling) == 4
    assert tree.depth(np.int64(3)) == 3 and tree.path_to(3) == [0, 1, 3]
    shape = specstate.TraceShape(requests=np.int64(2), rounds=3, window=tree)
    trace = specstate.generate_geometric(shape, np.float32(0.5))
    assert len(trace.records) == 6
    plan = specstate.plan(tp=np.int64(1), window=T) if specstate.HAS_CLI else {"tp": 1}
    assert plan["tp"] == 1
    assert committed_bytes(model) == 2 * model.slot_bytes()


def refused(pool: specstate.StatePool, opts: specstate.PoolOptions,
            layer: specstate.GdnConfig) -> None:
    """Never called: each of these raises TypeError at run time."""
    opts.num_slots = None  # type: ignore[assignment]
    opts.strategy = "replay"  # type: ignore[assignment]
    layer.conv_bias = None  # type: ignore[assignment]
    specstate.ModelConfig.kda("2", specstate.KdaConfig())  # type: ignore[arg-type]
    specstate.PoolOptions(num_slots=None)  # type: ignore[arg-type]
    specstate.GdnConfig(act_dtype=None)  # type: ignore[arg-type]
    specstate.Window.chain(None)  # type: ignore[arg-type]
    weights = specstate.GdnWeights(np.zeros(1), np.zeros(1), np.zeros(1))
    pool.verify(None, weights, specstate.GdnInputs(np.zeros(1), np.zeros(1), np.zeros(1)),  # type: ignore[call-overload]
                specstate.GdnOutputs(np.zeros(1)))
    specstate.read_trace(b"trace.json")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
