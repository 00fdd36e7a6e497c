"""The real client (examples/python/qwen3_next_spec.py): transformers' Qwen3-Next decoding
speculatively through specstate emits exactly model.generate's tokens (float32, CPU here; the
same test runs on CUDA where there is a device). Skipped without torch and transformers."""

import importlib.util
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
try:
    from transformers import Qwen3NextForCausalLM  # noqa: F401
except ImportError:
    pytest.skip("this transformers has no Qwen3-Next", allow_module_level=True)

import torch  # noqa: E402

import specstate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "..", "examples", "python", "qwen3_next_spec.py")


def load_client():
    spec = importlib.util.spec_from_file_location("qwen3_next_spec", CLIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strategy", ["snapshot", "replay"])
def test_token_exact_with_generate(strategy, device, capsys):
    client = load_client()
    try:
        rc = client.main(["--strategy", strategy, "--device", device, "--layers", "4",
                          "--new-tokens", "12", "--window", "3", "--noise", "0.005"])
    except specstate.NotSupportedError as e:
        pytest.skip(f"specstate built without its CUDA backend: {e}")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "identical to model.generate" in out, out
