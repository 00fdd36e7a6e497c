"""The extension imports in any order next to other native extensions and raises cleanly
(issue 17.1): each case runs in a fresh interpreter, so a crash (free(): invalid pointer, a
segfault at a raised error) shows as a failed subprocess, not a dead test run. With torch
installed (the H200) the torch orders run too; without it they skip visibly."""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import specstate

RAISE = (
    "import specstate\n"
    "pool = specstate.StatePool(specstate.ModelConfig.gated_delta_net(1, specstate.GdnConfig()),"
    " specstate.PoolOptions())\n"
    "try:\n"
    "    pool.release(specstate.SlotHandle.padding())\n"
    "except specstate.Error as e:\n"
    "    assert 'StatePool::release' in str(e), str(e)\n"
    "else:\n"
    "    raise SystemExit('no error raised')\n"
)


def run(code):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("other", ["numpy", "ml_dtypes"])
def test_either_import_order_with_another_native_extension(other):
    run(f"import specstate, {other}")
    run(f"import {other}, specstate")


def test_an_error_raised_after_import_is_caught():
    run(RAISE)


@pytest.mark.parametrize("first", ["specstate", "torch"])
def test_either_import_order_with_torch(first):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the H200 machine has it: python/gpu_check.sh)")
    second = "torch" if first == "specstate" else "specstate"
    run(f"import {first}\nimport {second}\n")
    run(f"import {first}\nimport {second}\n" + RAISE)


def test_the_extension_exports_only_its_init_function():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed")
    ext = next(pathlib.Path(specstate.__file__).parent.glob("_specstate*.so"), None)
    if ext is None:
        pytest.skip("no _specstate*.so next to the package (not a Linux build)")
    out = subprocess.run([nm, "-D", "--defined-only", str(ext)], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    names = sorted({line.split()[-1] for line in out if line.strip()})
    assert names == ["PyInit__specstate"], names[:20]


def test_the_extension_needs_no_spdlog_or_fmt_library():
    # scripts/test.sh builds the wheel self-contained (SPECSTATE_SELF_CONTAINED) and says so;
    # a plain `pip install .` links the system's spdlog / fmt.
    if os.environ.get("SPECSTATE_WHEEL_SELF_CONTAINED") != "1":
        pytest.skip("not a self-contained wheel (SPECSTATE_WHEEL_SELF_CONTAINED unset)")
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("ldd is not installed")
    ext = next(pathlib.Path(specstate.__file__).parent.glob("_specstate*.so"), None)
    if ext is None:
        pytest.skip("no _specstate*.so next to the package (not a Linux build)")
    out = subprocess.run([ldd, str(ext)], capture_output=True, text=True, check=True).stdout
    assert "libspdlog" not in out and "libfmt" not in out, out
