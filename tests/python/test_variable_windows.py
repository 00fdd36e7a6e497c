"""Variable windows and batched prefill through the Python package (CPU backend): a round whose
rows verify different numbers of tokens, packed with no filler, equals the uniform round with
filler tokens; prefill_batch equals one prefill per request; a commit past a row's own window
is rejected, naming the row."""

import numpy as np
import pytest

import specstate
from specstate import Strategy
from conftest import Model, bits, states


@pytest.mark.parametrize("strategy", [Strategy.SNAPSHOT, Strategy.REPLAY], ids=lambda s: s.name)
def test_packed_rows_equal_uniform_window(strategy):
    model = Model(seed=7)
    uni, var = model.pool(strategy), model.pool(strategy)
    hu = [uni.acquire() for _ in range(3)]
    hv = [var.acquire() for _ in range(3)]
    lengths = [3, 0, 2]
    prompt = model.inputs(sum(lengths))
    for layer, (x, a, b) in enumerate(prompt):
        var.prefill_batch(layer, hv, lengths, model.weights[layer], specstate.GdnInputs(x, a, b),
                          model.outputs(sum(lengths)))
        at = 0
        for h, n in zip(hu, lengths):
            if n:
                uni.prefill(layer, h, model.weights[layer],
                            specstate.GdnInputs(x[at:at + n], a[at:at + n], b[at:at + n]),
                            model.outputs(n))
            at += n
    T, win = 4, [4, 1, 2]
    real = [r * T + t for r, n in enumerate(win) for t in range(n)]
    uni.begin_verify(specstate.VerifyBatch(hu, window=T))
    var.begin_verify(specstate.VerifyBatch(hv, window=T, lengths=win))
    for layer, (x, a, b) in enumerate(model.inputs(3 * T)):
        ou, ov = model.outputs(3 * T), model.outputs(sum(win))
        uni.verify(layer, model.weights[layer], specstate.GdnInputs(x, a, b), ou)
        var.verify(layer, model.weights[layer],
                   specstate.GdnInputs(x[real], a[real], b[real]), ov)
        assert np.array_equal(bits(np.asarray(ou.core_out)[real]), bits(ov.core_out))
        assert np.abs(np.asarray(ov.core_out, dtype=np.float32)).sum() > 0
    with pytest.raises(specstate.Error, match=r"accepted\[1\] = 2.*row 1 verified 1 tokens"):
        var.commit([4, 2, 2])
    uni.commit([4, 1, 2])
    var.commit([4, 1, 2])
    for (cu, su), (cv, sv) in zip(states(uni, model.layers), states(var, model.layers)):
        assert np.array_equal(bits(cu), bits(cv)) and np.array_equal(bits(su), bits(sv))
