"""A pool over an engine's state tensors shaped as vLLM allocates its hybrid models' cache.

vLLM keeps, per recurrent layer, a conv state of shape ``(slots, W-1, conv_dim)`` (its default
"SD" layout, channels last) and a recurrent state of shape ``(slots, HV, K, V)`` for KDA (fla's
order), ``(slots, HV, V, K)`` for Gated DeltaNet and ``(slots, heads, head_dim, d_state)`` for
Mamba2. specstate adopts those tensors as they are: the pool's element order is set to match
(``PoolOptions.conv_layout = CHANNELS_LAST``; ``ssm_layout = KV`` for KDA) and the tensors are
handed over as the transposes specstate's logical shapes ask for, so nothing is copied and the
engine's tensors hold the committed state (docs/python.md, docs/lifecycle.md "Element order")::

    conv = [torch.zeros(slots, *specstate.vllm.conv_shape(config)[1:], ...) for _ in layers]
    pool = specstate.vllm.state_pool(config, specstate.PoolOptions(num_slots=slots, ...),
                                     conv_states=conv, recurrent_states=rec)

Any array with ``shape`` and ``swapaxes`` (NumPy, torch, CuPy, JAX) and DLPack works.
"""

from ._specstate import (
    ConvLayout,
    InvalidArgumentError,
    LayerKind,
    PoolOptions,
    SsmLayout,
    StatePool,
    Status,
)

__all__ = ["conv_shape", "recurrent_shape", "layout_options", "state_pool"]


def conv_shape(config, slots=1):
    """The shape of one layer's conv state in vLLM's cache: ``(slots, W-1, conv_dim)``."""
    return (slots, config.conv_width() - 1, config.conv_dim())


def recurrent_shape(config, slots=1):
    """The shape of one layer's recurrent state in vLLM's cache: KDA ``(slots, HV, K, V)``,
    Gated DeltaNet ``(slots, HV, V, K)``, Mamba2 ``(slots, heads, head_dim, d_state)``."""
    if config.kind == LayerKind.KDA:
        k = config.kda_layer
        return (slots, k.num_v_heads, k.head_k_dim, k.head_v_dim)
    if config.kind == LayerKind.MAMBA2:
        m = config.mamba
        return (slots, m.num_heads, m.head_dim, m.d_state)
    g = config.gdn
    return (slots, g.num_v_heads, g.head_v_dim, g.head_k_dim)


def layout_options(config):
    """The element order of vLLM's tensors for `config`'s kind, as PoolOptions fields."""
    kv = config.kind == LayerKind.KDA
    return dict(conv_layout=ConvLayout.CHANNELS_LAST,
                ssm_layout=SsmLayout.KV if kv else SsmLayout.VK)


def _invalid(message):
    error = InvalidArgumentError(message)
    error.status = Status.INVALID_ARGUMENT
    return error


def _check(name, tensors, layers, want):
    if len(tensors) != layers:
        raise _invalid(f"specstate.vllm.state_pool: {name} has {len(tensors)} tensors, the "
                       f"model has {layers} recurrent layers")
    for i, t in enumerate(tensors):
        shape = tuple(int(d) for d in t.shape)
        if len(shape) != len(want) or shape[1:] != want[1:]:
            raise _invalid(f"specstate.vllm.state_pool: {name}[{i}] has shape {shape}; vLLM's "
                           f"layout for this config is (slots,) + {want[1:]}")
        if shape[0] != tensors[0].shape[0]:
            raise _invalid(f"specstate.vllm.state_pool: {name}[{i}] has {shape[0]} slots, "
                           f"{name}[0] has {int(tensors[0].shape[0])}")


def state_pool(config, options, conv_states, recurrent_states):
    """A StatePool whose committed state lives in `conv_states` / `recurrent_states` (one tensor
    per recurrent layer, shaped as vLLM allocates them: conv_shape / recurrent_shape with any slot
    count). `options` is copied with conv_layout / ssm_layout set to vLLM's order (layout_options);
    its other fields are the caller's. Raises specstate.InvalidArgumentError naming the tensor
    when a shape is not vLLM's for `config` (a conv state with vLLM's extra speculative columns,
    W-1+num_spec, is refused: specstate owns the rollback, allocate W-1), and whatever the pool
    raises for strides, dtypes and devices."""
    layers = config.num_layers
    _check("conv_states", conv_states, layers, conv_shape(config))
    _check("recurrent_states", recurrent_states, layers, recurrent_shape(config))
    order = layout_options(config)
    opts = PoolOptions()
    for field in dir(options):
        if not field.startswith("_") and not callable(getattr(options, field)):
            setattr(opts, field, getattr(options, field))
    opts.conv_layout = order["conv_layout"]
    opts.ssm_layout = order["ssm_layout"]
    kv = order["ssm_layout"] == SsmLayout.KV
    return StatePool(config, opts,
                     committed_conv=[t.swapaxes(-1, -2) for t in conv_states],
                     committed_ssm=[t.swapaxes(-1, -2) if kv else t for t in recurrent_states])
