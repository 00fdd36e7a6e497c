#!/usr/bin/env python3
"""Speculative decoding of transformers' own Qwen3.5 (text) with specstate owning the GDN state.

transformers' `Qwen3_5ForCausalLM` (a tiny random config: Gated DeltaNet layers with a full
attention layer every fourth, as Qwen3.5 interleaves them; its GDN layers project q|k|v, z, b and
a separately, unlike Qwen3-Next's fused projections) decodes in speculative rounds through
examples/python/spec_loop.py: the GDN layers' conv + gated delta rule run in specstate's pool, the
attention layers keep transformers' KV cache, truncated on rejection. In float32 the emitted
tokens must equal `model.generate(do_sample=False)`; the script exits 1 otherwise.

    python examples/python/qwen3_5_spec.py --strategy replay --device cpu
"""

import os
import sys

import torch

import specstate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_loop import LayerOwner, act_dtype, client_arguments, run_client  # noqa: E402


class SpecstateQwen35Gdn(LayerOwner):
    """Owns the pool and replaces the forward of every Qwen3_5GatedDeltaNet of `model`."""

    def __init__(self, model, strategy, max_window, dtype):
        gdn = [m.linear_attn for m in model.model.layers if hasattr(m, "linear_attn")]
        first = gdn[0]
        act = act_dtype(dtype)
        layer = specstate.GdnConfig(
            num_k_heads=first.num_k_heads, num_v_heads=first.num_v_heads,
            head_k_dim=first.head_k_dim, head_v_dim=first.head_v_dim,
            conv_width=first.conv_kernel_size, conv_bias=first.conv1d.bias is not None,
            act_dtype=act, conv_state_dtype=act, ssm_state_dtype=specstate.DType.F32)
        super().__init__(gdn, specstate.ModelConfig.gated_delta_net(len(gdn), layer), strategy,
                         max_window, first.A_log.device)
        for index, module in enumerate(gdn):
            w = specstate.GdnWeights(  # views of the module's parameters, no copies
                conv_weight=module.conv1d.weight.detach().squeeze(1),
                A_log=module.A_log.detach(), dt_bias=module.dt_bias.detach(),
                conv_bias=None if module.conv1d.bias is None else module.conv1d.bias.detach())
            module.forward = self._make_forward(module, index, w)

    def _make_forward(self, m, index, weights):
        def forward(hidden_states, *args, **kwargs):  # [1, n, hidden]; the cache is ignored
            n = hidden_states.shape[1]
            mixed_qkv = m.in_proj_qkv(hidden_states)[0]  # [n, q | k | v]
            z = m.in_proj_z(hidden_states)
            b = m.in_proj_b(hidden_states)[0]
            a = m.in_proj_a(hidden_states)[0]
            core = torch.empty(n, m.num_v_heads, m.head_v_dim, dtype=mixed_qkv.dtype,
                               device=mixed_qkv.device)
            self.run(index, weights, specstate.GdnInputs(mixed_qkv, a, b),
                     specstate.GdnOutputs(core_out=core))
            out = m.norm(core.reshape(-1, m.head_v_dim), z.reshape(-1, m.head_v_dim))
            return m.out_proj(out.reshape(1, n, -1))
        return forward


def make_model(args):
    from transformers import Qwen3_5ForCausalLM
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    config = Qwen3_5TextConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=args.layers,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                     for i in range(args.layers)],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4,
        max_position_embeddings=1024, initializer_range=0.1,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
    return Qwen3_5ForCausalLM(config)


def main(argv=None):
    args = client_arguments(__doc__.split("\n")[0]).parse_args(argv)
    return run_client(args, "Qwen3.5", "GDN", make_model, SpecstateQwen35Gdn)


if __name__ == "__main__":
    sys.exit(main())
