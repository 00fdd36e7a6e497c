#!/usr/bin/env python3
"""Speculative decoding of transformers' own Qwen3-Next with specstate owning the GDN state.

transformers' `Qwen3NextForCausalLM` (a tiny random config: Gated DeltaNet layers with a full
attention layer every fourth, as the real model interleaves them) decodes in speculative rounds:

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

import argparse
import copy
import inspect
import sys

import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

import specstate


# --- specstate behind transformers' GDN layers ----------------------------------------------

class SpecstateGdn:
    """Owns the pool and replaces the forward of every Qwen3NextGatedDeltaNet of `model`."""

    def __init__(self, model, strategy, max_window, dtype):
        self.gdn = [m.linear_attn for m in model.model.layers if hasattr(m, "linear_attn")]
        first = self.gdn[0]
        act = specstate.DType.BF16 if dtype == torch.bfloat16 else specstate.DType.F32
        layer = specstate.GdnConfig(
            num_k_heads=first.num_k_heads, num_v_heads=first.num_v_heads,
            head_k_dim=first.head_k_dim, head_v_dim=first.head_v_dim,
            conv_width=first.conv_kernel_size, conv_bias=first.conv1d.bias is not None,
            act_dtype=act, conv_state_dtype=act, ssm_state_dtype=specstate.DType.F32)
        cuda = first.A_log.is_cuda
        self.stream = torch.cuda.current_stream().cuda_stream if cuda else None
        self.pool = specstate.StatePool(
            specstate.ModelConfig.gated_delta_net(len(self.gdn), layer),
            specstate.PoolOptions(num_slots=1, max_rows=1, max_window=max_window,
                                  strategy=strategy, stream=self.stream,
                                  backend=specstate.Backend.CUDA if cuda else
                                  specstate.Backend.CPU,
                                  device=first.A_log.device.index or 0))
        self.handle = self.pool.acquire()
        self.verifying = False
        for index, module in enumerate(self.gdn):
            w = specstate.GdnWeights(  # views of the module's parameters, no copies
                conv_weight=module.conv1d.weight.detach().squeeze(1),
                A_log=module.A_log.detach(), dt_bias=module.dt_bias.detach(),
                conv_bias=None if module.conv1d.bias is None else module.conv1d.bias.detach())
            module.forward = self._make_forward(module, index, w)

    def _make_forward(self, m, index, weights):
        def forward(hidden_states, *args, **kwargs):  # [1, n, hidden]; the cache is ignored
            n = hidden_states.shape[1]
            q, k, v, z, b, a = m.fix_query_key_value_ordering(m.in_proj_qkvz(hidden_states),
                                                              m.in_proj_ba(hidden_states))
            mixed_qkv = torch.cat([x.reshape(1, n, -1) for x in (q, k, v)], dim=-1)[0]
            core = torch.empty(n, m.num_v_heads, m.head_v_dim, dtype=mixed_qkv.dtype,
                               device=mixed_qkv.device)
            inputs = specstate.GdnInputs(mixed_qkv, a[0], b[0])  # a, b: strided views
            outputs = specstate.GdnOutputs(core_out=core)
            if self.verifying:  # the window of the open round; the committed state is unchanged
                self.pool.verify(index, weights, inputs, outputs, stream=self.stream)
            else:               # prompt: advances the committed state
                self.pool.prefill(index, self.handle, weights, inputs, outputs,
                                  stream=self.stream)
            out = m.norm(core.reshape(-1, m.head_v_dim), z.reshape(-1, m.head_v_dim))
            return m.out_proj(out.reshape(1, n, -1))
        return forward


def truncate_kv(cache, length):
    """Drops the KV entries of rejected tokens from every attention layer."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: per-layer objects
        for layer in layers:
            if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4:
                layer.keys = layer.keys[:, :, :length]
                layer.values = layer.values[:, :, :length]
        return
    for i, keys in enumerate(cache.key_cache):  # older Qwen3NextDynamicCache
        if keys is not None and keys.dim() == 4:
            cache.key_cache[i] = keys[:, :, :length]
            cache.value_cache[i] = cache.value_cache[i][:, :, :length]


# transformers >= 5 calls it `cache` (`past_key_values` is deprecated there).
CACHE_KWARG = ("cache" if "cache" in inspect.signature(Qwen3NextForCausalLM.forward).parameters
               else "past_key_values")


def new_cache(model):
    try:
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextDynamicCache
        return Qwen3NextDynamicCache(model.config)
    except ImportError:
        from transformers import DynamicCache
        return DynamicCache(config=model.config)


# --- drafters -------------------------------------------------------------------------------

class PerturbedDrafter:
    """The target with noise added to its weights: close, not equal (an imperfect draft model)."""

    def __init__(self, model, noise, seed):
        self.model = copy.deepcopy(model)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        with torch.no_grad():
            for p in self.model.parameters():
                delta = torch.randn(p.shape, generator=gen).to(p.device) * p.float().std()
                p.add_((delta * noise).to(p.dtype))

    def propose(self, context, k):
        ids = torch.tensor([context], device=self.model.device)
        out = self.model.generate(ids, max_new_tokens=k, do_sample=False, min_new_tokens=k)
        return out[0, len(context):].tolist()


class NgramDrafter:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the last n."""

    def __init__(self, n=2):
        self.n = n

    def propose(self, context, k):
        tail = context[-self.n:]
        for start in range(len(context) - self.n - 1, -1, -1):
            if context[start:start + self.n] == tail:
                follow = context[start + self.n:start + self.n + k]
                return (follow + [context[-1]] * k)[:k]
        return [context[-1]] * k


# --- the speculative loop -------------------------------------------------------------------

@torch.no_grad()
def speculative_generate(model, gdn, drafter, prompt, max_new_tokens, window):
    cache = new_cache(model)
    kv = {CACHE_KWARG: cache, "use_cache": True}  # transformers' KV cache: attention layers only
    ids = lambda tokens: torch.tensor([tokens], device=model.device)  # noqa: E731
    gdn.verifying = False
    logits = model(ids(prompt), **kv).logits
    root = int(logits[0, -1].argmax())
    out, context = [root], prompt + [root]
    rounds = proposed = accepted_drafts = 0
    while len(out) < max_new_tokens:
        tokens = [root] + drafter.propose(context, window - 1)          # the window, root first
        gdn.pool.begin_verify(specstate.VerifyBatch([gdn.handle], window=window))
        gdn.verifying = True
        logits = model(ids(tokens), **kv).logits[0]
        gdn.verifying = False
        target = logits.argmax(-1).tolist()                              # target[t]: after t
        acc = specstate.accept_greedy_chain(tokens, target)
        gdn.pool.commit([acc.accepted_length()], stream=gdn.stream)     # GDN: keep a tokens
        truncate_kv(cache, len(context) - 1 + acc.accepted_length())    # attention: the same
        new = acc.emitted(tokens)                                        # drafts kept + bonus
        out += new
        context += new
        root = acc.bonus_token
        rounds += 1
        proposed += window - 1
        accepted_drafts += acc.accepted_length() - 1
    return out[:max_new_tokens], dict(rounds=rounds, proposed=proposed, accepted=accepted_drafts)


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
        max_position_embeddings=1024, initializer_range=0.1,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strategy", choices=["snapshot", "replay"], default="replay")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--drafter", choices=["perturbed", "ngram"], default="perturbed")
    ap.add_argument("--noise", type=float, default=0.01,
                    help="perturbed drafter: weight noise relative to each tensor's std")
    ap.add_argument("--window", type=int, default=4, help="T: root + T-1 drafts per round")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (every 4th attention)")
    ap.add_argument("--prompt-len", type=int, default=12)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    model = Qwen3NextForCausalLM(tiny_config(args.layers)).to(args.device, dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(2, model.config.vocab_size, (args.prompt_len,), generator=gen).tolist()

    # transformers' own greedy decoding: the reference (before any hook is installed)
    drafter = (PerturbedDrafter(model, args.noise, args.seed + 2) if args.drafter == "perturbed"
               else NgramDrafter())
    with torch.no_grad():
        ids = torch.tensor([prompt], device=args.device)
        ref_out = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False,
                                 min_new_tokens=args.new_tokens,
                                 output_scores=True, return_dict_in_generate=True)
    reference = ref_out.sequences[0, len(prompt):].tolist()

    strategy = specstate.Strategy.SNAPSHOT if args.strategy == "snapshot" else \
        specstate.Strategy.REPLAY
    gdn = SpecstateGdn(model, strategy, args.window, dtype)
    tokens, stats = speculative_generate(model, gdn, drafter, prompt, args.new_tokens,
                                         args.window)

    pool = gdn.pool
    gdn_layers = len(gdn.gdn)
    print(f"specstate {specstate.__version__}: Qwen3-Next tiny ({args.layers} layers, "
          f"{gdn_layers} GDN + {args.layers - gdn_layers} attention), {args.dtype}, "
          f"{args.device}, strategy {args.strategy}, window {args.window}, "
          f"drafter {args.drafter}")
    print(f"rounds {stats['rounds']}, tokens/round {(len(tokens) - 1) / stats['rounds']:.2f}, "
          f"acceptance rate {stats['accepted'] / max(stats['proposed'], 1):.3f} "
          f"({stats['accepted']}/{stats['proposed']} drafts)")
    slot = pool.config.slot_bytes()
    per_round = (2 if args.strategy == "replay" else 1 + args.window + 2) * slot
    print(f"state: {slot} B committed per request ({gdn_layers} layers), workspace "
          f"{pool.workspace_bytes()} B; per round and request about {per_round} B of state "
          f"traffic ({'read + write once' if args.strategy == 'replay' else 'verify 1+T, commit 2'})")
    same = tokens == reference
    if same:
        print(f"tokens: identical to model.generate(do_sample=False) ({len(tokens)} tokens)")
        return 0
    first = next(i for i, (x, y) in enumerate(zip(tokens, reference)) if x != y)
    scores = ref_out.scores[first][0].float()
    top = scores.topk(2).values
    print(f"tokens: first difference at new token {first}: specstate {tokens[first]}, "
          f"generate {reference[first]}; generate's logit gap there {float(top[0] - top[1]):.3g}")
    return 0 if args.dtype != "float32" else 1


if __name__ == "__main__":
    sys.exit(main())
