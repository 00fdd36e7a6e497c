"""The Python examples (examples/python/*.py: the real clients and their shared loop) compile, so
that a syntax error cannot hide behind test_client.py's skip where torch or transformers is
absent (as in CI); the clients themselves run in test_client.py where they can."""

import glob
import os
import py_compile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = sorted(glob.glob(os.path.join(HERE, "..", "..", "examples", "python", "*.py")))


def test_there_are_examples():
    names = {os.path.basename(p) for p in EXAMPLES}
    assert {"spec_loop.py", "qwen3_next_spec.py", "qwen3_5_spec.py", "nemotron_h_spec.py",
            "kimi_linear_spec.py"} <= names, names


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_compiles(path, tmp_path):
    py_compile.compile(path, cfile=str(tmp_path / "out.pyc"), doraise=True)
