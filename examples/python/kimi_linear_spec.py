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

import os
import sys

import torch

import specstate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_loop import LayerOwner, act_dtype, client_arguments, run_client  # noqa: E402


class SpecstateKda(LayerOwner):
    """Owns the pool and replaces the forward of every KimiLinearDeltaAttention of `model`."""

    def __init__(self, model, strategy, max_window, dtype):
        kda = [layer.self_attn for layer in model.model.layers
               if type(layer.self_attn).__name__.endswith("DeltaAttention")]
        first = kda[0]
        act = act_dtype(dtype)
        layer = specstate.KdaConfig(
            num_k_heads=first.num_heads, num_v_heads=first.num_heads, head_k_dim=first.head_dim,
            head_v_dim=first.head_dim, conv_width=first.conv_kernel_size,
            conv_bias=first.conv1d.bias is not None, act_dtype=act, conv_state_dtype=act,
            ssm_state_dtype=specstate.DType.F32)
        super().__init__(kda, specstate.ModelConfig.kda(len(kda), layer), strategy, max_window,
                         first.q_proj.weight.device)
        for index, module in enumerate(kda):
            gate = module.forget_gate
            w = specstate.KdaWeights(  # views of the module's parameters, no copies
                conv_weight=module.conv1d.weight.detach().squeeze(1),
                A_log=gate.A_log.detach().reshape(module.num_heads),
                dt_bias=gate.dt_bias.detach().reshape(module.num_heads, module.head_dim),
                conv_bias=None if module.conv1d.bias is None else module.conv1d.bias.detach())
            module.forward = self._make_forward(module, index, w)

    def _make_forward(self, m, index, weights):
        def forward(hidden_states, *args, **kwargs):  # [1, n, hidden]; the cache is ignored
            n = hidden_states.shape[1]
            mixed_qkv = torch.cat([m.q_proj(hidden_states), m.k_proj(hidden_states),
                                   m.v_proj(hidden_states)], dim=-1)[0]  # [n, q | k | v]
            gate = m.forget_gate
            g = gate.f_b_proj(gate.f_a_proj(hidden_states))[0]  # raw gate, before dt_bias
            b = m.b_proj(hidden_states)[0]                       # beta logits
            core = torch.empty(n, m.num_heads, m.head_dim, dtype=mixed_qkv.dtype,
                               device=mixed_qkv.device)
            self.run(index, weights,
                     specstate.KdaInputs(mixed_qkv, g.reshape(n, m.num_heads, m.head_dim), b),
                     specstate.KdaOutputs(core_out=core))
            out_gate = m.g_b_proj(m.g_a_proj(hidden_states)).view(1, n, -1, m.head_dim)
            out = m.o_norm(core.view(1, n, m.num_heads, m.head_dim), out_gate)
            return m.o_proj(out.reshape(1, n, -1))
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
        max_position_embeddings=1024, initializer_range=0.1,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
    return KimiLinearForCausalLM(config)


def main(argv=None):
    args = client_arguments(__doc__.split("\n")[0]).parse_args(argv)
    return run_client(args, "Kimi-Linear", "KDA", make_model, SpecstateKda, other="MLA")


if __name__ == "__main__":
    sys.exit(main())
