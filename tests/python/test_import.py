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


def test_the_installed_type_stub_imports_what_exists_and_types_the_list_fields():
    """nanobind's stubgen imports the package, whose __init__.py wraps list fields in Python
    properties: the stub imported their closures (`from specstate import get as
    token_offsets`, which does not exist), lost VerifyBatch.rows / parents / lengths and made
    VerifyBatch.is_tree a property. python/stub_patterns.txt states those fields."""
    import ast
    stub = pathlib.Path(specstate.__file__).parent / "_specstate.pyi"
    if not stub.exists():
        pytest.skip(f"no {stub.name} next to the package (a build without stubs)")
    tree = ast.parse(stub.read_text(), str(stub))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), \
                    f"the stub imports {alias.name} from {node.module}, which has no such name"
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def members(cls):
        out = {}
        for n in classes[cls].body:
            if isinstance(n, ast.FunctionDef):
                decorators = [ast.unparse(d) for d in n.decorator_list]
                out.setdefault(n.name, []).append((decorators, ast.unparse(n.returns)
                                                   if n.returns else None))
        return out

    fields = {"VerifyBatch": {"rows": "list[SlotHandle]", "parents": "list[int]",
                              "lengths": "list[int]"},
              "Trace": {"requests": "list[int]", "records": "list[TraceRecord]"},
              "TraceRecord": {"path": "list[int]"}, "Acceptance": {"path": "list[int]"},
              "BatchPlan": {"windows": "list[Window]", "token_offsets": "list[int]"}}
    for cls, want in fields.items():
        m = members(cls)
        for name, returns in want.items():
            assert name in m, f"{cls}.{name} is missing from the stub"
            getter = m[name][0]
            assert getter == (["property"], returns), f"{cls}.{name}: {getter}"
            writable = isinstance(getattr(specstate, cls).__dict__[name], property) and \
                getattr(specstate, cls).__dict__[name].fset is not None
            assert (len(m[name]) == 2) == writable, f"{cls}.{name}: setter {m[name]}"
    # __eq__ / __ne__ take any object (h == None is False), as object's own: a stub taking the
    # class failed mypy's override check, so stubtest could not run.
    for cls in ("SlotHandle", "Window"):
        for op in ("__eq__", "__ne__"):
            fn = next(n for n in classes[cls].body if isinstance(n, ast.FunctionDef) and n.name == op)
            assert ast.unparse((fn.args.posonlyargs + fn.args.args)[1].annotation) == "object", f"{cls}.{op}: {ast.unparse(fn)}"
    # Methods stay methods (a broken property block above them had made them properties).
    for cls, name in (("VerifyBatch", "is_tree"), ("BatchPlan", "rows"),
                      ("TraceRecord", "accepted_length")):
        assert members(cls)[name][0][0] == [], f"{cls}.{name} is decorated in the stub"
    # The views are typed as the DLPack protocol the package declares (they were `object`, so
    # `np.from_dlpack(pool.ssm_state(0))` failed mypy), and the stub imports its module.
    for name in ("conv_state", "ssm_state", "workspace", "snapshot_conv", "snapshot_ssm"):
        assert members("StatePool")[name] == [([], "specstate._types.DLPackArray")], \
            f"StatePool.{name}: {members('StatePool')[name]}"
    assert any(isinstance(n, ast.Import) and [a.name for a in n.names] == ["specstate._types"]
               for n in tree.body)
    # The exception classes are classes of the stub with their runtime bases (they were imported
    # from the package, which imports them from the extension: a cycle that type checkers
    # resolved to Any), and the names __init__.py and __main__.py read are declared.
    for name in ("Error", "InvalidArgumentError", "OutOfRangeError", "ResourceExhaustedError",
                 "FailedPreconditionError", "NotSupportedError", "BackendError"):
        assert name in classes, f"{name} is not a class of the stub"
        runtime = getattr(specstate, name)
        assert [ast.unparse(b) for b in classes[name].bases] == \
            [b.__name__ for b in runtime.__bases__], f"{name}: {ast.unparse(classes[name])}"
    assert "status: Status" in ast.unparse(classes["Error"])
    declared = {ast.unparse(n.target) for n in tree.body if isinstance(n, ast.AnnAssign)}
    assert {"__version__", "HAS_CLI"} <= declared, declared
    assert "_cli_main" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_the_package_type_checks_under_mypy():
    """mypy --strict over the installed package and its stub, and over an engine's typed use of
    it (typed_usage.py, whose refused calls must each be an error), where mypy is installed.
    The stub's exception import cycle, __exit__ -> bool, `object | None` for integers, enums
    and bools, Sequence[int] refusing NumPy arrays, and vllm.py without annotations failed it."""
    api = pytest.importorskip("mypy.api", reason="mypy is not installed")
    usage = str(pathlib.Path(__file__).parent / "typed_usage.py")
    for target in (["-p", "specstate"], [usage]):
        stdout, stderr, code = api.run(["--strict", "--no-incremental", "--cache-dir",
                                        os.devnull, *target])
        assert code == 0, f"{target}: {stdout}{stderr}"


def test_the_typed_usage_runs():
    """typed_usage.py's engine (what mypy checks above) runs as it is typed."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    try:
        import typed_usage
    finally:
        sys.path.pop(0)
    typed_usage.main()


def test_the_views_are_the_dlpack_protocol_the_package_names():
    model = specstate.ModelConfig.gated_delta_net(
        1, specstate.GdnConfig(num_k_heads=1, num_v_heads=1, head_k_dim=8, head_v_dim=8))
    pool = specstate.StatePool(model, specstate.PoolOptions(num_slots=2))
    for view in (pool.ssm_state(0), pool.conv_state(0)):
        assert isinstance(view, specstate.DLPackArray)
    assert not isinstance([1.0], specstate.DLPackArray)
    assert not isinstance(object(), specstate.DLPackArray)
