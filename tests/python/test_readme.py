"""The documentation's Python runs as written: every ```python block of README.md and
docs/python.md is executed. A document reads top to bottom, so each block runs after the
document's earlier blocks, in one namespace, as a reader typing them into one session would
(README.md's block stands alone). Blocks that need CUDA (torch.cuda, Backend.CUDA) skip, saying
so, without torch, a CUDA device or specstate's CUDA backend; the CPU blocks never build on them.
Files a block writes land in a temporary directory."""

import pathlib
import re
import textwrap

import pytest

import specstate

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", "docs/python.md"]
# A fenced block, possibly indented (inside a list item): the closing fence has the same indent.
FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.M | re.S)


def needs_cuda(code):
    return any(s in code for s in ("torch.cuda", "Backend.CUDA", 'device="cuda"'))


def python_blocks(document):
    """(first line of the code, code) of every ```python block of `document`, in order."""
    text = (ROOT / document).read_text()
    blocks = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start(2)) + 1
        blocks.append((line, textwrap.dedent(m.group(2))))
    assert len(blocks) == text.count("```python"), f"{document}: a ```python block was not parsed"
    return blocks


CASES = [pytest.param(doc, i, id=f"{doc}:{line}")
         for doc in DOCUMENTS for i, (line, _) in enumerate(python_blocks(doc))]


def run(document, line, code, namespace):
    # Padded so that a traceback's line numbers are the document's.
    compiled = compile("\n" * (line - 1) + code, str(ROOT / document), "exec")
    exec(compiled, namespace)


def test_the_readme_has_a_python_example():
    assert python_blocks("README.md"), "README.md has no ```python block"


@pytest.mark.parametrize("document,index", CASES)
def test_python_block_runs(document, index, tmp_path, monkeypatch):
    blocks = python_blocks(document)
    line, code = blocks[index]
    if needs_cuda(code):
        torch = pytest.importorskip("torch", reason=f"{document}:{line} needs torch with CUDA")
        if not torch.cuda.is_available():
            pytest.skip(f"{document}:{line} needs a CUDA device")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for earlier_line, earlier in blocks[:index]:
        if not needs_cuda(earlier):
            run(document, earlier_line, earlier, namespace)
    try:
        run(document, line, code, namespace)
    except specstate.NotSupportedError as e:
        if not needs_cuda(code):
            raise
        pytest.skip(f"{document}:{line}: specstate built without its CUDA backend ({e})")
