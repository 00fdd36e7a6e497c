"""Types the stub of the extension names, for type checkers: the pool's zero-copy views
(``StatePool.conv_state``, ``ssm_state``, ``workspace``, ``snapshot_conv``, ``snapshot_ssm``)
and the integer and float lists the calls take. Importing it imports nothing else (NumPy's types
are named for type checkers only)."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, SupportsFloat, SupportsIndex, Union, runtime_checkable

if TYPE_CHECKING:
    import numpy.typing


@runtime_checkable
class DLPackArray(Protocol):
    """An array of pool memory exported through DLPack, which keeps the pool alive: pass it to
    ``numpy.from_dlpack``, ``torch.from_dlpack`` or ``cupy.from_dlpack`` (or
    ``specstate.to_numpy`` for bfloat16 on the CPU)."""

    # `stream` alone, as NumPy's arrays declare it (a NumPy or torch array conforms too).
    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


class TensorLike(Protocol):
    """A torch tensor of numbers (one dimension) where a list is taken: its values are read with
    ``tolist()``."""

    def dim(self) -> int: ...

    def tolist(self) -> Any: ...


# A list of integers as the calls take it: any sequence of ints (Python's, NumPy's), a NumPy
# array of them, or a 1-D torch tensor (each element is checked and named when it is no integer).
# A list of floats likewise. (NumPy's array type for type checkers only: at run time, where these
# aliases resolve for tools that read annotations, it is Any.)
if TYPE_CHECKING:
    _NDArray = numpy.typing.NDArray[Any]
else:
    _NDArray = Any
IntSequence = Union[Sequence[SupportsIndex], _NDArray, TensorLike]
FloatSequence = Union[Sequence[Union[SupportsFloat, SupportsIndex]], _NDArray, TensorLike]
