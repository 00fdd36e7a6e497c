#!/usr/bin/env python3
"""Speculative decoding of transformers' own Qwen3-Next with specstate owning the GDN state.

transformers' `Qwen3NextForCausalLM` (a tiny random config: Gated DeltaNet layers with a full
attention layer every fourth, as the real model interleaves them) decodes in speculative rounds
(the loop, the drafters and the check are examples/python/spec_loop.py, shared by every client):

  * every GDN layer's forward is hooked: its projections, gating and output norm stay
    transformers' code, the conv + gated delta rule run in specstate's pool
    (prefill / verify); specstate owns every GDN layer's conv and SSM state;
  * the attention layers keep transformers' KV cache, truncated to the accepted tokens;
  * a deliberately imperfect drafter (the same model with perturbed weights, or n-gram lookup)
    proposes T-1 tokens, the target verifies the window [root, drafts] in one forward, greedy
    acceptance keeps a prefix, `pool.commit` keeps the GDN state after exactly that prefix.

In float32 the emitted tokens must equal `model.generate(do_sample=False)` on the same prompt;
the script checks it and exits 1 otherwise.

    python examples/python/qwen3_next_spec.py --strategy replay --device cpu
    python examples/python/qwen3_next_spec.py --strategy snapshot --device cuda --window 5
"""

import os
import sys

import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_loop import MAX_POSITIONS, GdnOwner, client_arguments, run_client  # noqa: E402


def project(m, hidden_states):
    """Qwen3-Next's fused projections, split into the GDN layer's inputs."""
    n = hidden_states.shape[1]
    q, k, v, z, b, a = m.fix_query_key_value_ordering(m.in_proj_qkvz(hidden_states),
                                                      m.in_proj_ba(hidden_states))
    mixed_qkv = torch.cat([x.reshape(1, n, -1) for x in (q, k, v)], dim=-1)[0]
    return mixed_qkv, a[0], b[0], z


def owner(model, strategy, max_window, dtype):
    return GdnOwner(model, strategy, max_window, dtype, project)


def hybrid_cache():
    try:
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextDynamicCache
        return Qwen3NextDynamicCache
    except ImportError:
        return None


def tiny_config(layers):
    return Qwen3NextConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                     for i in range(layers)],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
        shared_expert_intermediate_size=64, decoder_sparse_step=1,
        max_position_embeddings=MAX_POSITIONS, initializer_range=0.1,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)


def main(argv=None):
    args = client_arguments(__doc__.split("\n")[0]).parse_args(argv)
    return run_client(args, "Qwen3-Next", "GDN", lambda a: Qwen3NextForCausalLM(tiny_config(a.layers)),
                      owner, hybrid_cache())


if __name__ == "__main__":
    sys.exit(main())
