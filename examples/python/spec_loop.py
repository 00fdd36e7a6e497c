"""What every real client shares (examples/python/*_spec.py): a transformers hybrid model whose
recurrent layers run in a specstate pool, decoded in speculative rounds and checked token for
token against the model's own `generate(do_sample=False)`.

A client supplies the model (a tiny random config, no downloads) and a `LayerOwner` subclass that
replaces the forward of each recurrent layer: transformers' projections, gates and output norm
stay, the layer's conv and recurrence run in specstate's pool (prefill while the prompt is read,
verify inside a round). The attention layers keep transformers' KV cache, truncated to the
accepted tokens after every round; `pool.commit` keeps the recurrent state after exactly the
accepted prefix.
"""

import argparse
import copy
import inspect
import math

import torch

import specstate


STATE_LAYOUTS = ("specstate", "vllm")


def vllm_cache(config, slots, device):
    """Per-layer tensors shaped as vLLM allocates its hybrid models' cache for `config`
    (specstate.vllm.conv_shape / recurrent_shape: channels-last conv windows; GDN and KDA states
    [HV][V][K], as vLLM's kernels keep them since its PR #33291), zeros: (conv states, recurrent
    states)."""
    dtype = lambda d: torch.bfloat16 if d == specstate.DType.BF16 else torch.float32  # noqa: E731
    layers = range(config.num_layers)
    conv = [torch.zeros(specstate.vllm.conv_shape(config, slots),
                        dtype=dtype(config.conv_state_dtype()), device=device) for _ in layers]
    state = [torch.zeros(specstate.vllm.recurrent_shape(config, slots),
                         dtype=dtype(config.ssm_state_dtype()), device=device) for _ in layers]
    return conv, state


class LayerOwner:
    """Owns one pool for `layers` (the model's recurrent modules) and routes their forward:
    `run(index, weights, inputs, outputs)` verifies inside a round, prefills otherwise. The pool
    is made by `open(layout)`: its own memory ("specstate"), or tensors shaped as vLLM's cache
    that it adopts ("vllm": vllm_cache, specstate.vllm.state_pool)."""

    def __init__(self, layers, model_config, strategy, max_window, device):
        self.layers = layers
        self.model_config = model_config
        self.strategy = strategy
        self.max_window = max_window
        self.device = device
        cuda = device.type == "cuda"
        self.stream = torch.cuda.current_stream().cuda_stream if cuda else None
        self.cache = None
        self.pool = None
        self.handle = None
        self.verifying = False

    def open(self, layout="specstate"):
        cuda = self.device.type == "cuda"
        options = dict(num_slots=1, max_rows=1, max_window=self.max_window,
                       strategy=self.strategy, stream=self.stream,
                       backend=specstate.Backend.CUDA if cuda else specstate.Backend.CPU,
                       device=self.device.index or 0)
        self.layout = layout
        if layout == "vllm":  # the pool adopts the engine's tensors (specstate.vllm)
            self.cache = vllm_cache(self.model_config, 1, self.device)
            self.pool = specstate.vllm.state_pool(self.model_config,
                                                  specstate.PoolOptions(**options), *self.cache)
        else:
            self.pool = specstate.StatePool(self.model_config, specstate.PoolOptions(**options))
        self.handle = self.pool.acquire()
        return self

    def run(self, index, weights, inputs, outputs):
        if self.verifying:  # the window of the open round; the committed state is unchanged
            self.pool.verify(index, weights, inputs, outputs, stream=self.stream)
        else:               # prompt: advances the committed state
            self.pool.prefill(index, self.handle, weights, inputs, outputs, stream=self.stream)


def act_dtype(dtype):
    return specstate.DType.BF16 if dtype == torch.bfloat16 else specstate.DType.F32


class GdnOwner(LayerOwner):
    """A LayerOwner for the Gated DeltaNet layers (`linear_attn`) of a Qwen-style model.
    `project(m, hidden_states)` gives a layer's (mixed_qkv [n, q | k | v], a [n, HV], b [n, HV],
    z [1, n, HV * V]), as that model's projections produce them; the conv and the delta rule run in
    the pool, the gated norm and out_proj stay the model's."""

    def __init__(self, model, strategy, max_window, dtype, project):
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
            module.forward = self._make_forward(module, index, w, project)

    def _make_forward(self, m, index, weights, project):
        def forward(hidden_states, *args, **kwargs):  # [1, n, hidden]; the cache is ignored
            n = hidden_states.shape[1]
            mixed_qkv, a, b, z = project(m, hidden_states)
            core = torch.empty(n, m.num_v_heads, m.head_v_dim, dtype=mixed_qkv.dtype,
                               device=mixed_qkv.device)
            self.run(index, weights, specstate.GdnInputs(mixed_qkv, a, b),  # a, b may be strided
                     specstate.GdnOutputs(core_out=core))
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
    for i, keys in enumerate(cache.key_cache):  # older hybrid caches
        if keys is not None and keys.dim() == 4:
            cache.key_cache[i] = keys[:, :, :length]
            cache.value_cache[i] = cache.value_cache[i][:, :, :length]


def cache_kwarg(model):
    """transformers >= 5 calls it `cache` (`past_key_values` is deprecated there)."""
    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_cache(model, hybrid_cache=None):
    """The model's hybrid cache class where it has one, else a DynamicCache for its config."""
    if hybrid_cache is not None:
        return hybrid_cache(model.config)
    from transformers import DynamicCache
    return DynamicCache(config=model.config)


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
        if k == 0:  # a window of the root alone: nothing to draft
            return []
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


@torch.no_grad()
def speculative_generate(model, owner, drafter, prompt, max_new_tokens, window, cache):
    kv = {cache_kwarg(model): cache, "use_cache": True}  # KV cache: attention layers only
    ids = lambda tokens: torch.tensor([tokens], device=model.device)  # noqa: E731
    # Every forward names its tokens' positions. Left to the model, they start at
    # cache.get_seq_length(), which transformers 5.25 reads from layer 0's cache: a linear
    # attention layer's token count, never advanced here (specstate owns those layers' state), so
    # every round's queries and keys were rotated as positions 0..T-1 (Qwen3-Next, Qwen3.5).
    def positions(start, n):
        return torch.arange(start, start + n, device=model.device)[None]

    owner.verifying = False
    logits = model(ids(prompt), position_ids=positions(0, len(prompt)), **kv).logits
    root = int(logits[0, -1].argmax())
    out, context = [root], prompt + [root]
    rounds = proposed = accepted_drafts = 0
    while len(out) < max_new_tokens:
        tokens = [root] + drafter.propose(context, window - 1)          # the window, root first
        owner.pool.begin_verify(specstate.VerifyBatch([owner.handle], window=window))
        owner.verifying = True
        # the window's root is the context's last token, at position len(context) - 1
        logits = model(ids(tokens), position_ids=positions(len(context) - 1, window),
                       **kv).logits[0]
        owner.verifying = False
        target = logits.argmax(-1).tolist()                              # target[t]: after t
        acc = specstate.accept_greedy_chain(tokens, target)
        owner.pool.commit([acc.accepted_length()], stream=owner.stream)  # recurrent: a tokens
        truncate_kv(cache, len(context) - 1 + acc.accepted_length())    # attention: the same
        new = acc.emitted(tokens)                                        # drafts kept + bonus
        out += new
        context += new
        root = acc.bonus_token
        rounds += 1
        proposed += window - 1
        accepted_drafts += acc.accepted_length() - 1
    # emitted: every round's tokens, the last round's past max_new_tokens included
    return out[:max_new_tokens], dict(rounds=rounds, proposed=proposed, accepted=accepted_drafts,
                                      emitted=len(out) - 1)


# The clients' tiny models' positions (max_position_embeddings): a prompt and its new tokens fit.
MAX_POSITIONS = 1024


def _between(low, high, kind=int):
    """An argparse type: a finite `kind` in [low, high], else an error naming the value."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind.__name__}") from None
        if not math.isfinite(value) or value < low or value > high:
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number in "
                                             f"[{low}, {high}]")
        return value
    return parse


class _ClientParser(argparse.ArgumentParser):
    """The clients' options, each bounded by what a tiny model runs (a window, layer count or
    length past them ran the reference decode first and failed after it, or asked for unbounded
    memory and time), and a prompt, its new tokens and a round's window within MAX_POSITIONS."""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        # A round verifies `window` positions past the tokens so far.
        if ns.prompt_len + ns.new_tokens + ns.window - 1 > MAX_POSITIONS:
            self.error(f"--prompt-len {ns.prompt_len} + --new-tokens {ns.new_tokens} + --window "
                       f"{ns.window} - 1 is more than the tiny model's {MAX_POSITIONS} positions")
        return ns


def client_arguments(description, layers=8, noise=0.01):
    ap = _ClientParser(description=description)
    ap.add_argument("--strategy", choices=["snapshot", "replay"], default="replay")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--drafter", choices=["perturbed", "ngram"], default="perturbed")
    ap.add_argument("--noise", type=_between(0.0, 100.0, float), default=noise,
                    help="perturbed drafter: weight noise relative to each tensor's std")
    ap.add_argument("--window", type=_between(1, 64), default=4,
                    help="T: root + T-1 drafts per round (<= 64)")
    # The tiny configs put an attention layer every 4th layer: fewer have none, and transformers'
    # hybrid cache needs one.
    ap.add_argument("--layers", type=_between(4, 64), default=layers,
                    help="decoder layers (4..64)")
    ap.add_argument("--prompt-len", type=_between(1, MAX_POSITIONS - 1), default=12)
    ap.add_argument("--new-tokens", type=_between(1, MAX_POSITIONS - 1), default=48,
                    help=f"prompt-len + new-tokens + window - 1 <= {MAX_POSITIONS}")
    ap.add_argument("--seed", type=_between(0, 2**63 - 1), default=0)
    ap.add_argument("--state-layout", choices=STATE_LAYOUTS, default="specstate",
                    help="the pool's memory: its own (specstate's element order), or tensors "
                         "shaped as vLLM's cache (channels-last conv windows, recurrent "
                         "states as vLLM's kernels keep them) that the pool adopts")
    return ap


def run_client(args, name, kind, make_model, make_owner, hybrid_cache=None, other="attention"):
    """Builds the model (`make_model(args)`, on args.device in args.dtype), decodes the reference
    with `generate`, installs the owner (`make_owner(model, strategy, window, dtype)`, its pool
    opened in args.state_layout), decodes
    speculatively and reports. Returns 0 when the tokens are identical (any mismatch in bfloat16
    is reported with the logit gap where the tokens first differ, and returns 0 too). `kind`
    names the recurrent layers in the report, `other` the rest."""
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    model = make_model(args).to(args.device, dtype).eval()
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
    owner = make_owner(model, strategy, args.window, dtype).open(args.state_layout)
    tokens, stats = speculative_generate(model, owner, drafter, prompt, args.new_tokens,
                                         args.window, new_cache(model, hybrid_cache))

    pool = owner.pool
    recurrent = len(owner.layers)
    print(f"specstate {specstate.__version__}: {name} tiny ({args.layers} layers, {recurrent} "
          f"{kind} + {args.layers - recurrent} {other}), {args.dtype}, {args.device}, "
          f"strategy {args.strategy}, window {args.window}, drafter {args.drafter}, "
          f"state layout {args.state_layout}")
    tokens_per_round = stats['emitted'] / max(stats['rounds'], 1)
    print(f"rounds {stats['rounds']}, tokens/round {tokens_per_round:.2f}, "
          f"acceptance rate {stats['accepted'] / max(stats['proposed'], 1):.3f} "
          f"({stats['accepted']}/{stats['proposed']} drafts)")
    slot = pool.config.slot_bytes()
    per_round = (2 if args.strategy == "replay" else 1 + args.window + 2) * slot
    print(f"state: {slot} B committed per request ({recurrent} layers), workspace "
          f"{pool.workspace_bytes()} B; per round and request about {per_round} B of state "
          f"traffic ({'read + write once' if args.strategy == 'replay' else 'verify 1+T, commit 2'})")
    if owner.cache is not None:
        pool.materialize()  # replay: the engine's tensors hold the committed state from here on
        conv, state = owner.cache
        print(f"state in vLLM's cache layout: conv_state {tuple(conv[0].shape)}, recurrent state "
              f"{tuple(state[0].shape)} per layer, adopted by the pool (nonzero: "
              f"{bool(state[0].abs().sum() > 0)})")
    if tokens == reference:
        print(f"tokens: identical to model.generate(do_sample=False) ({len(tokens)} tokens)")
        return 0
    first = next(i for i, (x, y) in enumerate(zip(tokens, reference)) if x != y)
    scores = ref_out.scores[first][0].float()
    top = scores.topk(2).values
    print(f"tokens: first difference at new token {first}: specstate {tokens[first]}, "
          f"generate {reference[first]}; generate's logit gap there {float(top[0] - top[1]):.3g}")
    return 0 if args.dtype != "float32" else 1
