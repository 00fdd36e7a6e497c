"""The real clients (examples/python/*_spec.py, one per layer kind): transformers' own hybrid
models decoding speculatively through specstate emit exactly model.generate's tokens (float32, CPU
here; the same tests run on CUDA where there is a device: every kind has CUDA kernels).
Qwen3-Next and Qwen3.5 (GDN), Nemotron-H (Mamba2), Kimi-Linear (KDA). Skipped without torch and
transformers, or where this transformers lacks the model."""

import importlib.util
import os
import re

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch  # noqa: E402

import specstate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")

# client script, the transformers class it needs, extra arguments (drafts that get rejected)
CLIENTS = {
    "qwen3_next": ("qwen3_next_spec.py", "Qwen3NextForCausalLM", ["--noise", "0.005"]),
    "qwen3_5": ("qwen3_5_spec.py", "Qwen3_5ForCausalLM", []),
    "nemotron_h": ("nemotron_h_spec.py", "NemotronHForCausalLM", []),
    "kimi_linear": ("kimi_linear_spec.py", "KimiLinearForCausalLM", []),
}


def load_client(script):
    spec = importlib.util.spec_from_file_location(script[:-3], os.path.join(EXAMPLES, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (The CUDA cases skip visibly where torch sees no GPU: they were not generated at all.)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="torch sees no CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["specstate", "vllm"])
@pytest.mark.parametrize("strategy", ["snapshot", "replay"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_token_exact_with_generate(client, strategy, layout, device, capsys):
    """`layout` vllm: the pool adopts tensors shaped as vLLM's cache (spec_loop.vllm_cache)."""
    script, model_class, extra = CLIENTS[client]
    if not hasattr(transformers, model_class):
        pytest.skip(f"this transformers ({transformers.__version__}) has no {model_class}")
    module = load_client(script)
    # 6 layers: the attention layer (every fourth) feeds later recurrent layers; 32 tokens of
    # windows of 4 (4 layers and 12 tokens passed with every verify round's positions wrong).
    rc = module.main(["--strategy", strategy, "--device", device, "--layers", "6",
                      "--new-tokens", "32", "--window", "4", "--state-layout", layout] + extra)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "identical to model.generate" in out, out
    # the report names the client's model and its rounds (the check ran on real rounds), and
    # some drafts were accepted and some rejected: both the commit of a > 1 tokens and the
    # rollback (KV truncation below the window, the recurrent state kept at a < T) ran
    assert "rounds " in out and "tokens/round" in out, out
    m = re.search(r"\((\d+)/(\d+) drafts\)", out)
    assert m is not None, out
    accepted, proposed = int(m.group(1)), int(m.group(2))
    assert 0 < accepted < proposed, out
    if layout == "vllm":  # the state lives in the engine's tensors
        assert "state in vLLM's cache layout" in out and "(nonzero: True)" in out, out


def test_client_arguments_are_checked_and_edge_windows_run(capsys):
    """Values that cannot run are argparse errors naming the option (they were tracebacks from
    the pool, torch or transformers, some after the whole run); --new-tokens 1 (no round: it
    divided by zero after the run) and --window 1 (the drafter asked generate for 0 tokens)
    run."""
    module = load_client("qwen3_next_spec.py")
    if not hasattr(transformers, "Qwen3NextForCausalLM"):
        pytest.skip("this transformers has no Qwen3NextForCausalLM")
    for bad in (["--window", "0"], ["--layers", "3"], ["--prompt-len", "0"],
                ["--new-tokens", "0"], ["--noise", "nan"], ["--seed", "-1"],
                # past what a tiny model runs (unbounded memory and time, or a refusal after the
                # reference decode had run)
                ["--window", "100000"], ["--layers", "1000000000"], ["--prompt-len", "1024"],
                ["--new-tokens", "1000000000000"], ["--seed", str(2**70)], ["--noise", "1e9"]):
        with pytest.raises(SystemExit) as e:
            module.main(bad)
        assert e.value.code == 2, bad
        assert f"argument {bad[0]}: '{bad[1]}'" in capsys.readouterr().err, bad
    with pytest.raises(SystemExit) as e:
        module.main(["--prompt-len", "1000", "--new-tokens", "24", "--window", "64"])
    assert e.value.code == 2
    assert ("--prompt-len 1000 + --new-tokens 24 + --window 64 - 1 is more than the tiny "
            "model's 1024 positions") in capsys.readouterr().err
    for edge in (["--new-tokens", "1"], ["--window", "1", "--new-tokens", "5"]):
        assert module.main(["--layers", "4"] + edge) == 0, edge
        out = capsys.readouterr().out
        assert "identical to model.generate" in out and "tokens/round" in out, out
