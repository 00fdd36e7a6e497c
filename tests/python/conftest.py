"""Shared helpers of the Python tests: a small GDN model, random weights and inputs (NumPy)."""

import numpy as np
import pytest

import specstate

try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:  # bf16 tests skip
    BF16 = None

NP_DTYPE = {specstate.DType.F32: np.float32}
if BF16 is not None:
    NP_DTYPE[specstate.DType.BF16] = BF16


def layer_config(act=specstate.DType.F32, conv_bias=False, head_k_dim=8):
    return specstate.GdnConfig(num_k_heads=2, num_v_heads=4, head_k_dim=head_k_dim, head_v_dim=16,
                               conv_width=4, conv_bias=conv_bias, act_dtype=act,
                               conv_state_dtype=act, ssm_state_dtype=specstate.DType.F32)


class Model:
    """L GDN layers with random weights; makes inputs and outputs for n tokens."""

    def __init__(self, layers=2, act=specstate.DType.F32, seed=0, conv_bias=False, head_k_dim=8):
        if act not in NP_DTYPE:
            pytest.skip("ml_dtypes is not installed")
        self.cfg = layer_config(act, conv_bias, head_k_dim)
        self.config = specstate.ModelConfig.gated_delta_net(layers, self.cfg)
        self.layers = layers
        self.dtype = NP_DTYPE[act]
        self.rng = np.random.default_rng(seed)
        c, hv, w = self.cfg.conv_dim(), self.cfg.num_v_heads, self.cfg.conv_width
        self.weights = []
        for _ in range(layers):
            bias = self.arr(c, scale=0.1) if conv_bias else None
            self.weights.append(specstate.GdnWeights(
                conv_weight=self.arr(c, w, scale=0.5), A_log=self.arr(hv, scale=0.5),
                dt_bias=self.arr(hv, scale=0.5), conv_bias=bias))

    def arr(self, *shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32).astype(self.dtype)

    def inputs(self, n):
        """[layers] of (mixed_qkv, a, b) arrays for n tokens."""
        c, hv = self.cfg.conv_dim(), self.cfg.num_v_heads
        return [(self.arr(n, c), self.arr(n, hv), self.arr(n, hv)) for _ in range(self.layers)]

    def outputs(self, n):
        c, hv, v = self.cfg.conv_dim(), self.cfg.num_v_heads, self.cfg.head_v_dim
        return specstate.GdnOutputs(core_out=np.zeros((n, hv, v), self.dtype),
                                    conv_out=np.zeros((n, c), self.dtype))

    def pool(self, strategy=specstate.Strategy.SNAPSHOT, slots=4, rows=4, window=4):
        return specstate.StatePool(self.config, specstate.PoolOptions(
            num_slots=slots, max_rows=rows, max_window=window, strategy=strategy))


def states(pool, layers):
    """Copies of every layer's committed (conv, ssm) state, as raw bytes-exact arrays."""
    pool.materialize()
    out = []
    for layer in range(layers):
        out.append((np.array(specstate.to_numpy(pool.conv_state(layer))),
                    np.array(specstate.to_numpy(pool.ssm_state(layer)))))
    return out


def bits(a):
    """An array's raw bits, for bit-exact comparisons of any dtype."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8)
