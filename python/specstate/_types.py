"""Types the stub of the extension names, for type checkers: the pool's zero-copy views
(``StatePool.conv_state``, ``ssm_state``, ``workspace``, ``snapshot_conv``, ``snapshot_ssm``)
and the integer and float lists the calls take."""

from collections.abc import Sequence
from typing import Any, Protocol, SupportsFloat, SupportsIndex, Union, runtime_checkable

import numpy.typing


@runtime_checkable
class DLPackArray(Protocol):
    """An array of pool memory exported through DLPack, which keeps the pool alive: pass it to
    ``numpy.from_dlpack``, ``torch.from_dlpack`` or ``cupy.from_dlpack`` (or
    ``specstate.to_numpy`` for bfloat16 on the CPU)."""

    # `stream` alone, as NumPy's arrays declare it (a NumPy or torch array conforms too).
    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


# A list of integers as the calls take it: any sequence of ints (Python's, NumPy's), or a NumPy
# array of them (each element is checked and named when it is not an integer).
IntSequence = Union[Sequence[SupportsIndex], numpy.typing.NDArray[Any]]
# A list of floats: any sequence of numbers, or a NumPy array of them.
FloatSequence = Union[Sequence[Union[SupportsFloat, SupportsIndex]], numpy.typing.NDArray[Any]]
