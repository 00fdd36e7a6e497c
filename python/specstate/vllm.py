"""A pool over an engine's state tensors shaped as vLLM allocates its hybrid models' cache.

vLLM keeps, per recurrent layer, a conv state of shape ``(slots, W-1, conv_dim)`` (its default
"SD" layout, channels last) and a recurrent state of shape ``(slots, HV, V, K)`` for Gated
DeltaNet and KDA (the order of vLLM's kernels since its PR #33291 of 2026-01, which KDA shares; its
prefill output kernel followed in #40956) and ``(slots, heads, head_dim, d_state)`` for Mamba2.
vLLM before PR #33291 (and fla's kernels by default) kept the delta-rule states as
``(slots, HV, K, V)``: pass ``order=SsmLayout.KV`` for such an engine. specstate adopts the
tensors as they are: the pool's element order is set to match (``PoolOptions.conv_layout =
CHANNELS_LAST``, ``ssm_layout = order``) and the tensors are handed over as the transposes
specstate's logical shapes ask for, so nothing is copied and the engine's tensors hold the
committed state (docs/python.md, docs/lifecycle.md "Element order"). Under the replay strategy
they hold its checkpoint: a commit moves the slot's cursor, and the tensors equal the committed
state once it is materialized (``pool.materialize()``, a view, ``export_slot`` or ``release``):
an engine that reads them itself between rounds (its own kernels, a prefix-cache copy)
materializes first, or uses the snapshot strategy::

    conv = [torch.zeros(slots, *specstate.vllm.conv_shape(config)[1:], ...) for _ in layers]
    pool = specstate.vllm.state_pool(config, specstate.PoolOptions(num_slots=slots, ...),
                                     conv_states=conv, recurrent_states=rec)

Any array with ``shape`` and ``swapaxes`` (NumPy, torch, CuPy, JAX) and DLPack works.
"""

from collections.abc import Iterator
from typing import Any, Protocol, SupportsIndex

from . import _specstate
from ._specstate import (
    Error,
    InvalidArgumentError,
    ModelConfig,
    PoolOptions,
    SsmLayout,
    StatePool,
    Status,
)

__all__ = ["conv_shape", "recurrent_shape", "layout_options", "state_pool"]


class StateTensor(Protocol):
    """What state_pool takes per layer: an array with ``shape`` and ``swapaxes`` (NumPy, torch,
    CuPy, JAX) that the pool can read through DLPack."""

    @property
    def shape(self) -> Any: ...

    def swapaxes(self, axis1: int, axis2: int, /) -> Any: ...


class StateTensors(Protocol):
    """One tensor per recurrent layer: a list of them, or one stacked ``[layers, slots, ...]``
    array (as vLLM v0's cache keeps them)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...

    def __iter__(self) -> Iterator[StateTensor]: ...


def _check_shape_args(function: str, config: object, slots: object) -> None:
    # Named here: the binding's own TypeError names a private function (_vllm_conv_shape).
    if not isinstance(config, ModelConfig):
        raise TypeError(f"specstate.vllm.{function}: config: expected a ModelConfig, got "
                        f"{type(config).__name__}")
    # Any integer (int, NumPy's, a 0-d integer array: __index__), not a bool.
    if isinstance(slots, bool) or not hasattr(type(slots), "__index__"):
        raise TypeError(f"specstate.vllm.{function}: slots: expected an int, got "
                        f"{type(slots).__name__}")


def conv_shape(config: ModelConfig, slots: SupportsIndex = 1) -> tuple[int, ...]:
    """The shape of one layer's conv state in vLLM's cache: ``(slots, W-1, conv_dim)``."""
    _check_shape_args("conv_shape", config, slots)
    return tuple(_specstate._vllm_conv_shape(config, slots))


def _check_order(function: str, order: object) -> None:
    if not isinstance(order, SsmLayout):
        raise _invalid(f"specstate.vllm.{function}: order = {order!r} is not an SsmLayout "
                       "(SsmLayout.VK or SsmLayout.KV)")


def recurrent_shape(config: ModelConfig, slots: SupportsIndex = 1,
                    order: SsmLayout = SsmLayout.VK) -> tuple[int, ...]:
    """The shape of one layer's recurrent state in vLLM's cache: Gated DeltaNet and KDA
    ``(slots, HV, V, K)`` (`order` VK, vLLM's since PR #33291) or ``(slots, HV, K, V)`` (KV,
    vLLM's before it), Mamba2 ``(slots, heads, head_dim, d_state)`` (KV refused). C++:
    specstate::vllm::recurrent_shape."""
    _check_shape_args("recurrent_shape", config, slots)
    _check_order("recurrent_shape", order)
    return tuple(_specstate._vllm_recurrent_shape(config, slots, order))


def layout_options(options: PoolOptions, config: ModelConfig,
                   order: SsmLayout = SsmLayout.VK) -> PoolOptions:
    """A copy of `options` (PoolOptions) with vLLM's element order for `config`: conv_layout
    CHANNELS_LAST, ssm_layout `order` (delta-rule kinds; KV refused for Mamba2). C++:
    specstate::vllm::layout_options."""
    _check_order("layout_options", order)
    for name, value, kind in (("options", options, PoolOptions), ("config", config, ModelConfig)):
        if not isinstance(value, kind):
            raise TypeError(f"specstate.vllm.layout_options: {name}: expected a {kind.__name__}, "
                            f"got {type(value).__name__}")
    return _specstate._vllm_layout_options(options, config, order)


def _invalid(message: str) -> InvalidArgumentError:
    error = InvalidArgumentError(message)
    error.status = Status.INVALID_ARGUMENT
    return error


def _check(name: str, tensors: Any, layers: int, want: tuple[int, ...], slots: int) -> None:
    # Any sized, indexable sequence of tensors (a list, or one stacked [layers, slots, ...]
    # array as vLLM v0's cache keeps them); not an iterator (read once, then gone) nor a string.
    if isinstance(tensors, (str, bytes)) or not (hasattr(tensors, "__len__") and
                                                 hasattr(tensors, "__getitem__")):
        raise TypeError(f"specstate.vllm.state_pool: {name}: expected a sequence of tensors "
                        f"(a list, or a stacked array), got {type(tensors).__name__}")
    for i, t in enumerate(tensors):
        if not (hasattr(t, "shape") and hasattr(t, "swapaxes")):
            raise TypeError(f"specstate.vllm.state_pool: {name}[{i}]: expected an array with "
                            f"shape and swapaxes (NumPy, torch), got {type(t).__name__}")
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
        if shape[0] != slots:
            raise _invalid(f"specstate.vllm.state_pool: {name}[{i}] has shape {shape}: "
                           f"{shape[0]} slots, options.num_slots = {slots}")


def state_pool(config: ModelConfig, options: PoolOptions,
               conv_states: StateTensors, recurrent_states: StateTensors,
               order: SsmLayout = SsmLayout.VK) -> StatePool:
    """A StatePool whose committed state lives in `conv_states` / `recurrent_states` (one tensor
    per recurrent layer, shaped as vLLM allocates them: conv_shape / recurrent_shape(config,
    slots, order) with slots = options.num_slots). `options` is copied with conv_layout /
    ssm_layout set to vLLM's order (layout_options); its other fields are the caller's. `order`: the delta-rule
    kinds' state order, VK (vLLM's today) or KV (vLLM's before its PR #33291). Raises
    specstate.InvalidArgumentError naming the tensor when a shape is not vLLM's for `config`
    (a conv state with vLLM's extra speculative columns, W-1+num_spec, is refused: specstate owns
    the rollback, allocate W-1) or the order, and whatever the pool raises for strides, dtypes
    and devices."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"specstate.vllm.state_pool: config: expected a ModelConfig, got "
                        f"{type(config).__name__}")
    if not isinstance(options, PoolOptions):
        raise TypeError(f"specstate.vllm.state_pool: options: expected a PoolOptions, got "
                        f"{type(options).__name__}")
    layers = config.num_layers
    opts = layout_options(options, config, order)
    _check("conv_states", conv_states, layers, conv_shape(config), options.num_slots)
    _check("recurrent_states", recurrent_states, layers, recurrent_shape(config, 1, order),
           options.num_slots)
    kv = order == SsmLayout.KV
    try:
        return StatePool(config, opts,
                         committed_conv=[t.swapaxes(-1, -2) for t in conv_states],
                         committed_ssm=[t.swapaxes(-1, -2) if kv else t
                                        for t in recurrent_states])
    except (Error, TypeError, ValueError) as e:
        # The pool names its own arguments (committed_conv[i], committed.ssm[i]: the transposes
        # handed over); the caller's names are conv_states / recurrent_states.
        message = str(e)
        names = (("committed_conv", "conv_states"), ("committed.conv", "conv_states"),
                 ("committed_ssm", "recurrent_states"), ("committed.ssm", "recurrent_states"))
        for pool_name, name in names:
            message = message.replace(pool_name, name)
        if message == str(e):
            raise
        # Each note only where the message names that tensor (no recurrent state is transposed
        # in the default order).
        notes = []
        if "conv_states" in message:
            notes.append("the transposed view [slots, conv_dim, W-1] of each conv state")
        if kv and "recurrent_states" in message:
            notes.append("the transposed view of each recurrent state (order KV)")
        if notes:
            message += " (specstate.vllm.state_pool hands the pool " + "; ".join(notes) + ")"
        error = type(e)(message)
        if isinstance(e, Error) and isinstance(error, Error):
            error.status = e.status
        raise error from e
