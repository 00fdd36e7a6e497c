"""specstate: the recurrent state of hybrid LLMs (Gated DeltaNet, Mamba2, KDA) during
speculative decoding.

A pool holds every request's committed conv and SSM state per layer. One speculative round::

    pool.begin_verify(specstate.VerifyBatch([h], window=T))
    for layer in range(L):
        pool.verify(layer, weights[layer], inputs[layer], outputs[layer])
    pool.commit([accepted_length])

Arrays (NumPy, torch, CuPy, JAX) are taken through DLPack with zero copies; pool memory comes
back as zero-copy arrays supporting ``__dlpack__``. See docs/python.md.
"""

import sys
import typing
from collections.abc import Iterable
from typing import Any, SupportsIndex

if typing.TYPE_CHECKING:
    import numpy.typing

from ._types import DLPackArray as DLPackArray  # the views' type (re-exported for type checkers)
from . import _specstate
from ._specstate import *  # noqa: F401,F403
from ._specstate import (  # noqa: F401
    Error,
    InvalidArgumentError,
    OutOfRangeError,
    ResourceExhaustedError,
    FailedPreconditionError,
    NotSupportedError,
    BackendError,
)

# (nanobind's stubs leave the module's __version__ out: typed here, so that type checkers see it)
__version__: str = _specstate.__version__

HAS_CLI = _specstate.HAS_CLI


def to_numpy(view: DLPackArray) -> "numpy.typing.NDArray[Any]":
    """A NumPy array over the memory of ``view`` (a CPU pool view or any CPU array), no copy.

    bfloat16 views come back as ``ml_dtypes.bfloat16`` arrays (NumPy has no DLPack bfloat16).
    The array keeps the pool alive.
    """
    import numpy as np

    if not hasattr(view, "__dlpack__"):
        raise TypeError(f"view: expected a pool view or an array with __dlpack__, "
                        f"got {type(view).__name__}")
    torch = sys.modules.get("torch")  # a torch tensor exists only where torch is imported
    if torch is not None and isinstance(view, torch.Tensor):  # subclasses too
        # The bindings' checks first: a torch tensor with a pending negation or conjugation
        # exports its memory without the flag (its values would come back with the wrong sign).
        for flag in ("is_neg", "is_conj"):
            if getattr(view, flag, lambda: False)():
                raise ValueError(f"view: a torch tensor with its "
                                 f"{'negative' if flag == 'is_neg' else 'conjugate'} bit set "
                                 f"(a lazy view); call .resolve_neg() / .resolve_conj() first")
    try:
        return np.from_dlpack(view)
    except (BufferError, TypeError, RuntimeError, ValueError) as error:
        # NumPy has no DLPack bfloat16: such a view goes through its uint16 bits. Anything else
        # NumPy refused (another dtype, a device array) is NumPy's error, as it was raised.
        try:
            bf16 = _specstate.describe(view).startswith("bf16")
        except (TypeError, ValueError):
            bf16 = False
        if not bf16:
            raise error
        import ml_dtypes

        out: numpy.typing.NDArray[Any] = np.from_dlpack(_specstate._bf16_bits(view)).view(
            ml_dtypes.bfloat16)
        # The bits are imported as the memory allows; a read-only source (a read-only NumPy
        # array, bytes through np.frombuffer) gives a read-only result, as np.from_dlpack does.
        flags = getattr(view, "flags", None)
        if flags is not None and not getattr(flags, "writeable", True):
            out.flags.writeable = False
        return out


class CopiedList(list[Any]):
    """A list field's value that is a copy of the C++ object's (``VerifyBatch.rows``,
    ``parents``, ``lengths``, ``Trace.requests``, ``records``, ``BatchPlan.windows``,
    ``token_offsets``): it compares, indexes and iterates as a list, and an in-place
    change raises TypeError instead of changing a copy that nobody reads."""

    __slots__ = ("_field", "_read_only")

    def __init__(self, items: Iterable[Any], field: str, read_only: bool = False) -> None:
        super().__init__(items)
        self._field = field
        self._read_only = read_only

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        if self._read_only:
            raise TypeError(f"{self._field} returns a copy and is read-only")
        raise TypeError(
            f"{self._field} returns a copy: assign a new list ({self._field} = [...]) to change it")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = _refuse

    # `batch.rows += [h]` works: += makes a new list and assigns it back to the field. On a
    # local copy (`r = batch.rows; r += [h]`) it rebinds `r` to the new list and leaves the copy
    # as it was; a read-only field refuses the assignment.
    def __iadd__(self, other: Iterable[Any]) -> "list[Any]":  # type: ignore[override, misc]
        return list(self) + list(other)

    def __imul__(self, n: SupportsIndex) -> "list[Any]":  # type: ignore[override]
        return list(self) * n

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:  # copy, pickle: a list
        return (list, (list(self),))


def _copied_list_fields(cls: type, names: tuple[str, ...]) -> None:
    for name in names:
        field = getattr(cls, name)

        def get(self: Any, _field: Any = field, _label: str = f"{cls.__name__}.{name}",
                _ro: bool = field.fset is None) -> CopiedList:
            return CopiedList(_field.__get__(self), _label, _ro)

        def set_(self: Any, value: Any, _field: Any = field) -> None:
            _field.__set__(self, value)

        setattr(cls, name, property(get, set_ if field.fset else None, doc=field.__doc__))


_copied_list_fields(VerifyBatch, ("rows", "parents", "lengths"))  # noqa: F405
_copied_list_fields(Trace, ("requests", "records"))  # noqa: F405
_copied_list_fields(TraceRecord, ("path",))  # noqa: F405
_copied_list_fields(Acceptance, ("path",))  # noqa: F405
_copied_list_fields(BatchPlan, ("windows", "token_offsets"))  # noqa: F405 (read-only)

from . import vllm  # noqa: E402 (a pool over tensors shaped as vLLM's cache)

__all__ = [name for name in dir(_specstate) if not name.startswith("_")] + ["to_numpy", "vllm", "CopiedList"]
