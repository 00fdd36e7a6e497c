"""`pip install` puts the `specstate` command on PATH (issue 17.2): the same command line as the
CMake build's executable, exit statuses included."""
import json
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest

import specstate
from specstate import _specstate

pytestmark = pytest.mark.skipif(not getattr(_specstate, "HAS_CLI", False),
                                reason="built without the command line (CLI11 not found)")


def command():
    exe = pathlib.Path(sysconfig.get_path("scripts")) / "specstate"
    if not exe.exists():
        pytest.skip(f"no console script at {exe} (the package is not pip-installed here)")
    return str(exe)


def test_the_console_script_runs_plan_as_json():
    out = subprocess.run([command(), "plan", "--model", "qwen3-next-80b", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert j["committed_bytes_per_request"] > 0
    assert j["strategy"] == "snapshot"


def test_usage_errors_exit_2_and_python_m_works():
    bad = subprocess.run([command(), "plan", "--window", "0"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2, (bad.stdout, bad.stderr)
    assert "--window" in bad.stderr + bad.stdout
    ver = subprocess.run([sys.executable, "-m", "specstate", "--version"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert ver.returncode == 0, ver.stderr
    assert specstate.__version__ in ver.stdout
