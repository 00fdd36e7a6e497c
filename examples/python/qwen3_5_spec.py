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


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_loop import MAX_POSITIONS, GdnOwner, client_arguments, run_client  # noqa: E402


def project(m, hidden_states):
    """Qwen3.5's separate projections: q|k|v, z, b and a."""
    return (m.in_proj_qkv(hidden_states)[0], m.in_proj_a(hidden_states)[0],
            m.in_proj_b(hidden_states)[0], m.in_proj_z(hidden_states))


def owner(model, strategy, max_window, dtype):
    return GdnOwner(model, strategy, max_window, dtype, project)


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
        max_position_embeddings=MAX_POSITIONS, initializer_range=0.1,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)
    return Qwen3_5ForCausalLM(config)


def main(argv=None):
    args = client_arguments(__doc__.split("\n")[0]).parse_args(argv)
    return run_client(args, "Qwen3.5", "GDN", make_model, owner)


if __name__ == "__main__":
    sys.exit(main())
