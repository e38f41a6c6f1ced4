"""The compiled (mypyc) build of the hot modules (``kvsim_native``): same results as the
pure-Python modules, and never used when it no longer matches its sources."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvcore
from kvsim_native import build, depends, guard

HELPER = Path(__file__).with_name("native_digest_helper.py")


def _digests(*pure: bool) -> list[dict[str, str]]:
    """The helper's record digests, one run per flag (pure modules or not), the runs
    side by side (they are independent processes)."""
    procs = []
    for flag in pure:
        env = dict(os.environ)
        env.pop(guard.PURE_ENV, None)
        if flag:
            env[guard.PURE_ENV] = "1"
        cmd = [sys.executable, str(HELPER), "60", "120"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    return [json.loads(out) for out in outs]


@pytest.mark.skipif(
    kvcore.NATIVE_STATUS != "compiled",
    reason="no current compiled build (pip install -e . compiles one; a C compiler needed)",
)
def test_compiled_equals_pure() -> None:
    """60 simulator workloads, 120 conformance traces (40 of them also with async
    scheduling) and 4 runs with a KV connector (the CPU tier, P/D; each loop) give
    identical records."""
    compiled, pure = _digests(False, True)
    assert compiled.pop("native_status") == "compiled"
    assert pure.pop("native_status") == "disabled"
    assert len(compiled) == 224
    differ = [k for k in compiled if compiled[k] != pure[k]]
    assert not differ, f"compiled and pure kvcore differ on {differ}"


def _fake_package(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source tree with the listed modules and (fake) compiled modules."""
    monkeypatch.setattr(guard, "ROOT", tmp)
    monkeypatch.setattr(guard, "MANIFEST", tmp / "kvsim_native" / "manifest.json")
    monkeypatch.delenv(guard.PURE_ENV, raising=False)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in guard.NATIVE_MODULES:
        stem = tmp / name.replace(".", "/")
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".py").write_text(f"X = {name!r}\n")
        stem.with_name(stem.name + suffix).write_bytes(b"")
    shared = tmp / (guard.SHARED_LIB.replace(".", "/") + suffix)  # the group's library
    shared.parent.mkdir(exist_ok=True)
    shared.write_bytes(b"")
    build.write_manifest(guard.MANIFEST, build.source_digests())


def test_status_follows_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_package(tmp_path, monkeypatch)
    assert guard.status() == ("compiled", list(guard.NATIVE_MODULES))
    # An edited source makes the build stale: that module is named.
    (tmp_path / "kvcore" / "block_pool.py").write_text("X = 'edited'\n")
    assert guard.status() == ("stale", ["kvcore.block_pool"])
    (tmp_path / "sim" / "engine" / "replica.py").write_text("X = 'edited'\n")
    assert guard.status() == ("stale", ["kvcore.block_pool", "sim.engine.replica"])
    # A module compiled but missing from the manifest, or not compiled, is stale too.
    guard.MANIFEST.write_text("{}")
    assert guard.status()[0] == "stale"
    monkeypatch.setenv(guard.PURE_ENV, "1")
    assert guard.status()[0] == "disabled"
    # Without compiled files the package is pure Python, whatever the manifest says.
    removed = guard.clean()
    assert guard.MANIFEST in removed and len(removed) == len(build.extension_names()) + 1
    assert not any(p.exists() for p in removed)
    monkeypatch.delenv(guard.PURE_ENV)
    assert guard.status() == ("pure", [])


def test_an_extension_left_from_an_earlier_build_list_is_stale_and_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_package(tmp_path, monkeypatch)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "sim" / "plan").mkdir()
    left = tmp_path / "sim" / "plan" / ("probe" + suffix)  # once compiled, now not
    left.write_bytes(b"")
    (tmp_path / "sim" / "plan" / "probe.py").write_text("X = 1\n")
    assert guard.status() == ("stale", ["sim.plan.probe (no longer built)"])
    assert not guard.is_current()
    # The guard imports it from its source, with the listed modules.
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    assert guard.install_guard() == "stale"
    finder = next(f for f in sys.meta_path if isinstance(f, guard.SourceFinder))
    assert "sim.plan.probe" in finder.fullnames and "sim.engine.replica" in finder.fullnames
    removed = guard.clean()
    assert left in removed and not left.exists()
    assert guard.status() == ("pure", [])


def test_an_edited_module_the_build_imports_makes_it_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypyc compiles against the types of the uncompiled modules it imports: those are
    hashed too, however deep (a compiled module imports a package that imports one)."""
    _fake_package(tmp_path, monkeypatch)
    (tmp_path / "kvcore" / "block_pool.py").write_text("from kvcore.helpers import X\n")
    (tmp_path / "kvcore" / "helpers").mkdir()
    (tmp_path / "kvcore" / "helpers" / "__init__.py").write_text("from .deep import X\n")
    (tmp_path / "kvcore" / "helpers" / "deep.py").write_text("X = 1\n")
    assert depends.build_dependencies() == ["kvcore.helpers", "kvcore.helpers.deep"]
    build.write_manifest(guard.MANIFEST, build.source_digests())
    assert guard.status()[0] == "compiled"
    (tmp_path / "kvcore" / "helpers" / "deep.py").write_text("X = 2.0\n")
    assert guard.status() == ("stale", ["kvcore.helpers.deep (imported by the build)"])
    (tmp_path / "kvcore" / "helpers" / "deep.py").unlink()
    assert guard.status() == ("stale", ["kvcore.helpers.deep (imported by the build)"])


def test_a_manifest_of_an_earlier_format_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_package(tmp_path, monkeypatch)
    flat = {n: guard.source_digest(n) for n in guard.NATIVE_MODULES}
    guard.MANIFEST.write_text(json.dumps(flat))
    assert guard.status() == ("stale", list(guard.NATIVE_MODULES))


def test_pure_env_imports_sources() -> None:
    """With KVSIM_PURE_PYTHON=1 every listed module is imported from its ``.py``."""
    code = (
        "import importlib, kvcore\n"
        "from kvsim_native import NATIVE_MODULES\n"
        "files = [importlib.import_module(n).__file__ for n in NATIVE_MODULES]\n"
        "assert all(f.endswith('.py') for f in files), files\n"
        "print(kvcore.NATIVE_STATUS)\n"
    )
    env = dict(os.environ, **{guard.PURE_ENV: "1"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() in ("pure", "disabled")


def test_source_finder_only_takes_listed_modules() -> None:
    finder = guard.SourceFinder(["kvcore.block_pool", "sim.engine.replica"])
    spec = finder.find_spec("kvcore.block_pool")
    assert spec is not None and spec.origin.endswith("kvcore/block_pool.py")
    spec = finder.find_spec("sim.engine.replica")
    assert spec is not None and spec.origin.endswith("sim/engine/replica.py")
    assert finder.find_spec("kvcore.request_queue") is None
    assert finder.find_spec("block_pool") is None


def test_is_current_needs_every_module_compiled_and_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editable reinstall skips compiling only when nothing would change."""
    _fake_package(tmp_path, monkeypatch)
    assert guard.is_current()
    monkeypatch.setenv(guard.PURE_ENV, "1")  # forcing the pure modules changes no file
    assert guard.is_current()
    (tmp_path / "sim" / "records" / "recorders.py").write_text("X = 'edited'\n")
    assert not guard.is_current()
    build.write_manifest(guard.MANIFEST, build.source_digests())
    assert guard.is_current()
    next(iter(guard.compiled_files("kvcore.request"))).unlink()
    assert not guard.is_current()


def test_fallback_notice_is_one_line() -> None:
    line = build.fallback_notice("CompileError: command '/bin/false'\nfailed with exit code 1")
    assert "\n" not in line and line.startswith("kvsim: ")
    assert "CompileError: command '/bin/false' failed with exit code 1" in line
    compiler = "CompileError: Command '['/bin/false', '-O3', '-c', 'x.c']' returned non-zero"
    line = build.fallback_notice(compiler + " exit status 1." + " x" * 400)
    assert "CompileError: Command '/bin/false ...' returned non-zero exit status 1." in line
    assert "-O3" not in line and len(line) < 500


# The build step (setup.py) on a copy of the sources: its fall-backs, and the manifest it
# writes. mypyc is replaced by a stand-in (FAKE_MYPYC) so no test type-checks the whole
# package; the stand-in's extension is a real C module, compiled by the real compiler.

PACKAGES = ("kvsim_native", "kvcore", "sim", "calibrate", "workloads", "reports")
MANIFEST_PATH = guard.MANIFEST.relative_to(guard.ROOT)
FAKE_MYPYC = Path(__file__).with_name("native_fake_mypyc.py")


def _source_copy(tmp: Path) -> Path:
    """The build's inputs (setup.py, pyproject.toml, the packages' sources) in ``tmp``."""
    tree = tmp / "src"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        (tree / name).write_bytes((guard.ROOT / name).read_bytes())
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", guard.MANIFEST.name)
    for package in PACKAGES:
        shutil.copytree(guard.ROOT / package, tree / package, ignore=skip)
    fake = tmp / "fake" / "mypyc"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "build.py").write_bytes(FAKE_MYPYC.read_bytes())
    return tree


def _setup_py(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in (guard.PURE_ENV, "CC")}
    # no bytecode but what the build step writes itself
    environ.update(env, PYTHONPATH=str(tree.parent / "fake"), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", *args],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
    )


def _built(tree: Path) -> list[str]:
    return sorted(
        str(p.relative_to(tree))
        for package in PACKAGES
        for p in (tree / package).rglob("*")
        if p.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    )


def _uncached(tree: Path) -> list[str]:
    """The packages' modules in ``tree`` without a current bytecode cache file."""
    missing = []
    for package in PACKAGES:
        for source in sorted((tree / package).rglob("*.py")):
            cached = Path(importlib.util.cache_from_source(str(source)))
            if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
                missing.append(str(source.relative_to(tree)))
    return missing


def _status_in(tree: Path) -> list[str]:
    """``kvcore.NATIVE_STATUS`` and where ``kvcore.block_pool`` came from, imported in
    ``tree``."""
    code = (
        "import kvcore, kvcore.block_pool as b\n"
        "print(kvcore.NATIVE_STATUS); print(b.__file__.rpartition('/')[2])\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != guard.PURE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env=dict(environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


HAS_CC = shutil.which(os.environ.get("CC", "cc").split()[0]) is not None
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler (cc) to build the stand-in module")


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({guard.PURE_ENV: "1"}, "KVSIM_PURE_PYTHON is set"),
        ({"FAKE_MYPYC_FAILS": "1"}, "SystemExit: error: mypy found 1 error"),
        ({"CC": "/bin/false"}, "CompileError"),
    ],
    ids=["forced", "mypyc-fails", "no-compiler"],
)
def test_install_falls_back_to_pure_python(
    tmp_path: Path, env: dict[str, str], reason: str
) -> None:
    """Without a compiler, when mypyc fails, or when told to, the build succeeds in pure
    Python: one notice line, no compiled file left, no manifest, and an old build beside
    the sources removed (an editable install builds in place)."""
    tree = _source_copy(tmp_path)
    stale_so = tree / "sim" / ("engine" + importlib.machinery.EXTENSION_SUFFIXES[0])
    stale_so.write_bytes(b"")
    done = _setup_py(tree, "--inplace", **env)
    assert done.returncode == 0, done.stderr
    notices = [line for line in done.stderr.splitlines() if line.startswith("kvsim: ")]
    assert len(notices) == 1, done.stderr
    assert "pure Python" in notices[0] and reason in notices[0], notices[0]
    assert _built(tree) == [] and not (tree / MANIFEST_PATH).exists()
    assert _uncached(tree) == []  # pure Python needs its bytecode cache the most
    assert _status_in(tree) == ["pure", "block_pool.py"]


@needs_cc
def test_install_builds_in_place_and_the_guard_checks_it(tmp_path: Path) -> None:
    """An editable install's build lands beside the sources with the manifest, and runs;
    a reinstall with nothing changed compiles nothing; an edited source makes the guard
    import every listed module from source, until a reinstall compiles again."""
    tree = _source_copy(tmp_path)
    done = _setup_py(tree, "--inplace")
    assert done.returncode == 0, done.stderr
    assert "kvsim: " not in done.stderr
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    expected = sorted(n.replace(".", "/") + suffix for n in build.extension_names())
    assert _built(tree) == expected
    manifest = json.loads((tree / MANIFEST_PATH).read_text())
    assert manifest == build.source_digests()
    assert _uncached(tree) == []  # as pip writes a wheel's at install
    assert _status_in(tree) == ["compiled", f"block_pool{suffix}"]
    # Nothing changed: the build is left as it is (the stand-in would fail, and the
    # fall-back remove the build, were mypyc run).
    done = _setup_py(tree, "--inplace", FAKE_MYPYC_FAILS="1")
    assert done.returncode == 0 and "kvsim: " not in done.stderr, done.stderr
    assert _built(tree) == expected
    with (tree / "sim" / "engine" / "replica.py").open("a") as f:
        f.write("# edited\n")
    assert _status_in(tree) == ["stale", "block_pool.py"]
    done = _setup_py(tree, "--inplace")
    assert done.returncode == 0, done.stderr
    assert _status_in(tree) == ["compiled", f"block_pool{suffix}"]
    assert _uncached(tree) == []  # the edited module's cache written again


@needs_cc
def test_wheel_build_puts_the_manifest_beside_the_modules(tmp_path: Path) -> None:
    """``pip install .``: the build goes into the build directory (the wheel's
    contents), manifest included; the sources are left alone."""
    tree = _source_copy(tmp_path)
    done = _setup_py(tree, "--build-lib", str(tmp_path / "lib"))
    assert done.returncode == 0, done.stderr
    assert _built(tree) == []
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in build.extension_names():
        assert (tmp_path / "lib" / (name.replace(".", "/") + suffix)).exists(), name
    manifest = json.loads((tmp_path / "lib" / MANIFEST_PATH).read_text())
    assert manifest == build.source_digests()


@pytest.mark.skipif(
    kvcore.NATIVE_STATUS != "compiled",
    reason="no current compiled build (pip install -e . compiles one; a C compiler needed)",
)
def test_an_edited_source_of_a_real_build_runs_from_source(tmp_path: Path) -> None:
    """The installed compiled build, copied with its sources: as is, the compiled
    modules run; with one source edited, every listed module runs from its ``.py``."""
    tree = tmp_path / "copy"
    for package in PACKAGES:
        shutil.copytree(
            guard.ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert _status_in(tree)[0] == "compiled"
    assert _status_in(tree)[1] != "block_pool.py"
    with (tree / "sim" / "engine" / "replica.py").open("a") as f:
        f.write("# edited\n")
    assert _status_in(tree) == ["stale", "block_pool.py"]


def _third_party_imports(name: str) -> set[str]:
    tree = ast.parse(guard.source_path(name).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    tops = {n.partition(".")[0] for n in names}
    return tops - set(sys.stdlib_module_names) - {*PACKAGES, "__future__"}


def test_build_requires_the_packages_the_compiled_modules_import() -> None:
    """mypyc must see the types of what the compiled modules import: each such package
    is in BUILD_IMPORTS and in pyproject.toml's build requirements."""
    imported = set().union(*(_third_party_imports(n) for n in guard.NATIVE_MODULES))
    assert "simpy" in imported  # sim.engine.stretches.StepTimeout derives from it
    assert imported <= set(build.BUILD_IMPORTS)
    text = (guard.ROOT / "pyproject.toml").read_text()
    build_system = text[text.index("[build-system]") : text.index("[project]")]
    start = build_system.index("requires = [")
    requires = build_system[start : build_system.index("]", start)]
    for package in build.BUILD_IMPORTS:
        assert f'"{package}>=' in requires, package
    assert '"mypy>=' in requires and "torch" not in requires


def test_no_build_without_the_packages_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "BUILD_IMPORTS", ("numpy", "no_such_package_here"))
    with pytest.raises(ImportError, match="no_such_package_here not installed"):
        build.mypyc_extensions(Path("unused"))


def test_every_extension_gets_the_build_s_compiler_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypycify's extensions (the stand-in's here) are compiled with COMPILE_ARGS."""
    import types

    fake = types.ModuleType("mypyc.build")
    exec(compile(FAKE_MYPYC.read_text(), str(FAKE_MYPYC), "exec"), fake.__dict__)
    monkeypatch.setitem(sys.modules, "mypyc.build", fake)
    monkeypatch.setattr(build, "BUILD_IMPORTS", ())
    extensions = build.mypyc_extensions(tmp_path)
    assert len(extensions) == len(build.extension_names())
    # The stand-in's extensions have no arguments of their own.
    assert all(ext.extra_compile_args == build.COMPILE_ARGS for ext in extensions)
    assert build.COMPILE_ARGS or os.name == "nt"


@pytest.mark.skipif(
    kvcore.NATIVE_STATUS != "compiled",
    reason="no current compiled build (pip install -e . compiles one; a C compiler needed)",
)
def test_the_compiled_library_exports_only_its_init_function() -> None:
    """The group's library hides the compiled functions (COMPILE_ARGS, where the build
    adds any): the dynamic linker finds its init function and none of them."""
    import ctypes

    (path,) = guard.compiled_files(guard.SHARED_LIB)
    lib = ctypes.CDLL(str(path))
    assert hasattr(lib, "PyInit_hot__mypyc")
    hidden = not hasattr(lib, "CPyDef_block_pool___BlockPool___get_new_blocks")
    assert hidden == bool(build.COMPILE_ARGS)


def test_package_metadata_runs_no_mypyc(tmp_path: Path) -> None:
    """pip asks for the metadata before building (``egg_info``, which lists the
    extensions' sources): mypyc runs once, in the build, not there."""
    tree = _source_copy(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k != guard.PURE_ENV}
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
        cwd=tree,
        env=dict(environ, PYTHONPATH=str(tmp_path / "fake")),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "kvsim: " not in done.stderr and not (tree / "build").exists()
    sources = (tmp_path / "kvsim.egg-info" / "SOURCES.txt").read_text().split()
    assert "setup.py" in sources and "kvsim_native/build.py" in sources


@needs_cc
def test_module_build_rebuilds_in_place(tmp_path: Path) -> None:
    """``python -m kvsim_native build`` (no reinstall) makes the same in-place build."""
    tree = _source_copy(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k not in (guard.PURE_ENV, "CC")}
    fake = str(tmp_path / "fake")
    subprocess.run(
        [sys.executable, "-m", "kvsim_native", "build"],
        cwd=tree,
        env=dict(environ, PYTHONPATH=os.pathsep.join([fake, str(tree)])),
        capture_output=True,
        text=True,
        check=True,
    )
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    assert _built(tree) == sorted(n.replace(".", "/") + suffix for n in build.extension_names())
    manifest = json.loads((tree / MANIFEST_PATH).read_text())
    assert manifest == build.source_digests()
    assert _uncached(tree) == []  # as pip writes a wheel's at install
    assert _status_in(tree) == ["compiled", f"block_pool{suffix}"]
