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
    __version__,
)

HAS_CLI = _specstate.HAS_CLI


def to_numpy(view):
    """A NumPy array over the memory of ``view`` (a CPU pool view or any CPU array), no copy.

    bfloat16 views come back as ``ml_dtypes.bfloat16`` arrays (NumPy has no DLPack bfloat16).
    The array keeps the pool alive.
    """
    import numpy as np

    try:
        return np.from_dlpack(view)
    except (BufferError, TypeError, RuntimeError, ValueError):
        import ml_dtypes

        return np.from_dlpack(_specstate._bf16_bits(view)).view(ml_dtypes.bfloat16)


from . import vllm  # noqa: E402 (a pool over tensors shaped as vLLM's cache)

__all__ = [name for name in dir(_specstate) if not name.startswith("_")] + ["to_numpy", "vllm"]
