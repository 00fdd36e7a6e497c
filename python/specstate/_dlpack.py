"""The type of the pool's zero-copy views (``StatePool.conv_state``, ``ssm_state``,
``workspace``, ``snapshot_conv``, ``snapshot_ssm``), for type checkers."""

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class DLPackArray(Protocol):
    """An array of pool memory exported through DLPack, which keeps the pool alive: pass it to
    ``numpy.from_dlpack``, ``torch.from_dlpack`` or ``cupy.from_dlpack`` (or
    ``specstate.to_numpy`` for bfloat16 on the CPU)."""

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...
