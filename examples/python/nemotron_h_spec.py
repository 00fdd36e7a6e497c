#!/usr/bin/env python3
"""Speculative decoding of transformers' own Nemotron-H with specstate owning the Mamba2 state.

transformers' `NemotronHForCausalLM` (a tiny random config: Mamba2, MLP and attention blocks in a
Nemotron-H-like pattern) decodes in speculative rounds through examples/python/spec_loop.py:
every Mamba2 mixer keeps transformers' in_proj, gated RMSNorm and out_proj, and its causal conv
and selective state update run in specstate's pool (the D skip inside, the gate z applied by
transformers' norm afterwards, as the mixer does); the attention blocks keep transformers' KV
cache, truncated on rejection. In float32 the emitted tokens must equal
`model.generate(do_sample=False)`; the script exits 1 otherwise.

    python examples/python/nemotron_h_spec.py --strategy replay --device cpu
"""

import math
import os
import sys

import torch

import specstate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_loop import (  # noqa: E402
    MAX_POSITIONS, LayerOwner, act_dtype, client_arguments, run_client)


class SpecstateMamba2(LayerOwner):
    """Owns the pool and replaces the forward of every NemotronHMamba2Mixer of `model`."""

    def __init__(self, model, strategy, max_window, dtype):
        # by class: the block type is "mamba" in older transformers, "linear_attention" in newer
        mixers = [b.mixer for b in model.model.layers
                  if type(b.mixer).__name__.endswith("Mamba2Mixer")]
        first = mixers[0]
        act = act_dtype(dtype)
        # The clamp of dt (softplus'd) the reference applies: its CUDA-kernel path (mamba_ssm)
        # clamps to time_step_limit (older transformers keep it in the config); its torch path,
        # which runs wherever those kernels are missing (the CPU, the device machine), clamps
        # from below at time_step_min (0.001 by default; transformers issue #47246). About 10%
        # of this tiny model's dt fall below 0.001.
        fast = bool(getattr(sys.modules[type(first).__module__], "is_fast_path_available", False))
        if fast and first.in_proj.weight.device.type == "cuda":
            dt_min, dt_max = getattr(first, "time_step_limit", None) or tuple(
                getattr(model.config, "time_step_limit", (0.0, float("inf"))))
        else:
            dt_min = float(getattr(first, "time_step_min", 0.0) or 0.0)
            dt_max = float("inf")
        layer = specstate.Mamba2Config(
            num_heads=first.num_heads, head_dim=first.head_dim, d_state=first.ssm_state_size,
            n_groups=first.n_groups, conv_width=first.conv_kernel_size,
            conv_bias=first.use_conv_bias, d_skip=True, gate=False,
            dt_min=dt_min if dt_min > 0 else None,
            dt_max=dt_max if math.isfinite(dt_max) else None,
            act_dtype=act, conv_state_dtype=act, ssm_state_dtype=specstate.DType.F32)
        super().__init__(mixers, specstate.ModelConfig.mamba2(len(mixers), layer), strategy,
                         max_window, first.A_log.device)
        for index, module in enumerate(mixers):
            w = specstate.Mamba2Weights(  # views of the module's parameters, no copies
                conv_weight=module.conv1d.weight.detach().squeeze(1),
                A_log=module.A_log.detach(), dt_bias=module.dt_bias.detach(),
                conv_bias=None if module.conv1d.bias is None else module.conv1d.bias.detach(),
                D=module.D.detach())
            module.forward = self._make_forward(module, index, w)

    def _make_forward(self, m, index, weights):
        def forward(hidden_states, *args, **kwargs):  # [1, n, hidden]; the cache is ignored
            n = hidden_states.shape[1]
            projected = m.in_proj(hidden_states)
            gate, xBC, dt = projected.split([m.intermediate_size, m.conv_dim, m.num_heads],
                                            dim=-1)
            y = torch.empty(n, m.num_heads, m.head_dim, dtype=projected.dtype,
                            device=projected.device)
            self.run(index, weights, specstate.Mamba2Inputs(xBC[0], dt[0]),
                     specstate.Mamba2Outputs(y=y))
            out = m.norm(y.reshape(1, n, -1), gate)
            return m.out_proj(out.to(hidden_states.dtype))
        return forward


def make_model(args):
    from transformers import NemotronHConfig, NemotronHForCausalLM
    pattern = ["mamba", "mlp", "mamba", "attention"]  # Nemotron-H: mostly Mamba2 + MLP
    config = NemotronHConfig(
        vocab_size=512, hidden_size=128, num_hidden_layers=args.layers,
        layers_block_type=[pattern[i % len(pattern)] for i in range(args.layers)],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=256,
        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4,
        use_conv_bias=True, chunk_size=16, max_position_embeddings=MAX_POSITIONS,
        initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=None,
        tie_word_embeddings=False)
    return NemotronHForCausalLM(config)


def main(argv=None):
    # noise 0.05: the tiny model's drafts are accepted about 60% of the time (0.01: 97%)
    args = client_arguments(__doc__.split("\n")[0], noise=0.05).parse_args(argv)
    return run_client(args, "Nemotron-H", "Mamba2", make_model, SpecstateMamba2,
                      other="MLP / attention")


if __name__ == "__main__":
    sys.exit(main())
