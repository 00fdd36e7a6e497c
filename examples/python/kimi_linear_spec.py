#!/usr/bin/env python3
"""Speculative decoding of transformers' own Kimi-Linear with specstate owning the KDA state.

transformers' `KimiLinearForCausalLM` (a tiny random config: KDA layers with an MLA attention
layer every fourth, as Kimi-Linear interleaves them, dense MLPs) decodes in speculative rounds
through examples/python/spec_loop.py: every KDA layer keeps transformers' q/k/v projections, its
forget-gate and beta projections and its gated output norm, and the short conv over [q|k|v] and
the per-key-channel delta rule run in specstate's pool (the gate -exp(A_log) softplus(g + dt_bias)
and beta = sigmoid(b) computed inside, from the raw projections); the MLA layers keep
transformers' KV cache, truncated on rejection. In float32 the emitted tokens must equal
`model.generate(do_sample=False)`; the script exits 1 otherwise.

    python examples/python/kimi_linear_spec.py --strategy replay --device cpu
"""

import inspect
import os
import sys

import torch

import specstate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_loop import (  # noqa: E402
    MAX_POSITIONS, LayerOwner, act_dtype, client_arguments, run_client)


def _first(module, *names):
    """The first of `names` that `module` has (transformers renamed KDA's parts across versions)."""
    for name in names:
        if getattr(module, name, None) is not None:
            return getattr(module, name)
    raise AttributeError(f"{type(module).__name__} has none of {names}")


class KdaParts:
    """One KimiLinearDeltaAttention's pieces, under either naming of transformers: heads and dims
    (num_heads / head_dim, or num_k_heads, num_v_heads / head_k_dim, head_v_dim), the forget gate
    (forget_gate.{f_a_proj, f_b_proj, A_log, dt_bias}, or forget_gate_{down,up} with A_log and
    dt_bias on the module), beta (b_proj or beta_proj), the output gate (g_a_proj / g_b_proj,
    output_gate, or output_gate_{down,up}) and the lower bound where the version has one."""

    def __init__(self, m):
        self.H = getattr(m, "num_k_heads", None) or m.num_heads
        self.HV = getattr(m, "num_v_heads", None) or m.num_heads
        self.K = getattr(m, "head_k_dim", None) or m.head_dim
        self.V = getattr(m, "head_v_dim", None) or m.head_dim
        gate = getattr(m, "forget_gate", None)
        holder = gate if gate is not None and hasattr(gate, "A_log") else m
        self.A_log = holder.A_log.detach().reshape(self.HV)
        self.dt_bias = holder.dt_bias.detach().reshape(self.HV, self.K)
        if gate is not None and hasattr(gate, "f_a_proj"):
            self.gate_raw = lambda h: gate.f_b_proj(gate.f_a_proj(h))
        else:
            self.gate_raw = lambda h: m.forget_gate_up(m.forget_gate_down(h))
        self.beta_logits = _first(m, "b_proj", "beta_proj")
        if hasattr(m, "g_a_proj"):
            self.out_gate = lambda h: m.g_b_proj(m.g_a_proj(h))
        elif getattr(m, "output_gate", None) is not None:
            self.out_gate = m.output_gate
        else:
            self.out_gate = lambda h: m.output_gate_up(m.output_gate_down(h))
        self.lower_bound = getattr(m, "forget_gate_lower_bound", None)
        # Newer versions return (output, None) from the layer's forward, as the MLA layer does.
        source = inspect.getsource(type(m).forward)
        self.returns_pair = "return output, None" in source


class SpecstateKda(LayerOwner):
    """Owns the pool and replaces the forward of every KimiLinearDeltaAttention of `model`."""

    def __init__(self, model, strategy, max_window, dtype):
        kda = [layer.self_attn for layer in model.model.layers
               if type(layer.self_attn).__name__.endswith("DeltaAttention")]
        first, parts = kda[0], KdaParts(kda[0])
        act = act_dtype(dtype)
        layer = specstate.KdaConfig(
            num_k_heads=parts.H, num_v_heads=parts.HV, head_k_dim=parts.K, head_v_dim=parts.V,
            conv_width=first.conv_kernel_size, conv_bias=first.conv1d.bias is not None,
            lower_bound=parts.lower_bound, act_dtype=act, conv_state_dtype=act,
            ssm_state_dtype=specstate.DType.F32)
        super().__init__(kda, specstate.ModelConfig.kda(len(kda), layer), strategy, max_window,
                         first.q_proj.weight.device)
        for index, module in enumerate(kda):
            p = KdaParts(module)
            w = specstate.KdaWeights(  # views of the module's parameters, no copies
                conv_weight=module.conv1d.weight.detach().squeeze(1), A_log=p.A_log,
                dt_bias=p.dt_bias,
                conv_bias=None if module.conv1d.bias is None else module.conv1d.bias.detach())
            module.forward = self._make_forward(module, p, index, w)

    def _make_forward(self, m, p, index, weights):
        def forward(hidden_states, *args, **kwargs):  # [1, n, hidden]; the cache is ignored
            n = hidden_states.shape[1]
            mixed_qkv = torch.cat([m.q_proj(hidden_states), m.k_proj(hidden_states),
                                   m.v_proj(hidden_states)], dim=-1)[0]  # [n, q | k | v]
            g = p.gate_raw(hidden_states)[0]      # raw gate, before dt_bias
            b = p.beta_logits(hidden_states)[0]   # beta logits
            core = torch.empty(n, p.HV, p.V, dtype=mixed_qkv.dtype, device=mixed_qkv.device)
            self.run(index, weights, specstate.KdaInputs(mixed_qkv, g.reshape(n, p.HV, p.K), b),
                     specstate.KdaOutputs(core_out=core))
            out_gate = p.out_gate(hidden_states).view(1, n, p.HV, p.V)
            out = m.o_proj(m.o_norm(core.view(1, n, p.HV, p.V), out_gate).reshape(1, n, -1))
            return (out, None) if p.returns_pair else out
        return forward


def make_model(args):
    from transformers import KimiLinearConfig, KimiLinearForCausalLM
    config = KimiLinearConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=args.layers,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                     for i in range(args.layers)],
        mlp_layer_types=["dense"] * args.layers,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=None,
        qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
        linear_num_heads=4, linear_head_dim=32, linear_conv_kernel_dim=4,
        # the same sizes under the names other transformers versions use
        linear_attn_key_heads=4, linear_attn_value_heads=4, linear_attn_key_head_dim=32,
        linear_attn_value_head_dim=32, first_k_dense_replace=args.layers,
        max_position_embeddings=MAX_POSITIONS, initializer_range=0.1,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
    return KimiLinearForCausalLM(config)


def main(argv=None):
    args = client_arguments(__doc__.split("\n")[0]).parse_args(argv)
    return run_client(args, "Kimi-Linear", "KDA", make_model, SpecstateKda, other="MLA")


if __name__ == "__main__":
    sys.exit(main())
