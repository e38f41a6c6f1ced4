"""kvcore's optional mypyc build: same results as the pure-Python modules, and never
used when it no longer matches its sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvcore
from kvcore import native

HELPER = Path(__file__).with_name("native_digest_helper.py")


def _digests(pure: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(native.PURE_ENV, None)
    if pure:
        env[native.PURE_ENV] = "1"
    out = subprocess.run(
        [sys.executable, str(HELPER), "60", "120"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


@pytest.mark.skipif(
    kvcore.NATIVE_STATUS != "compiled",
    reason="no current compiled build (python -m kvcore.native_cli build); CI builds one",
)
def test_compiled_equals_pure() -> None:
    """60 simulator workloads and 120 conformance traces (40 of them also with async
    scheduling) give identical records."""
    compiled = _digests(pure=False)
    pure = _digests(pure=True)
    assert compiled.pop("native_status") == "compiled"
    assert pure.pop("native_status") == "disabled"
    assert len(compiled) == 220
    differ = [k for k in compiled if compiled[k] != pure[k]]
    assert not differ, f"compiled and pure kvcore differ on {differ}"


def _fake_package(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source tree with the listed modules and (fake) compiled modules."""
    monkeypatch.setattr(native, "ROOT", tmp)
    monkeypatch.setattr(native, "MANIFEST", tmp / "_native_manifest.json")
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    suffix = native.importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in native.NATIVE_MODULES:
        stem = tmp / name.replace(".", "/")
        stem.parent.mkdir(exist_ok=True)
        stem.with_suffix(".py").write_text(f"X = {name!r}\n")
        stem.with_name(stem.name + suffix).write_bytes(b"")
    digests = {n: native._source_digest(n) for n in native.NATIVE_MODULES}
    native.MANIFEST.write_text(json.dumps(digests))


def test_status_follows_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_package(tmp_path, monkeypatch)
    assert native.status() == ("compiled", list(native.NATIVE_MODULES))
    # An edited source makes the build stale: that module is named.
    (tmp_path / "kvcore" / "block_pool.py").write_text("X = 'edited'\n")
    assert native.status() == ("stale", ["kvcore.block_pool"])
    (tmp_path / "sim" / "engine.py").write_text("X = 'edited'\n")
    assert native.status() == ("stale", ["kvcore.block_pool", "sim.engine"])
    # A module compiled but missing from the manifest, or not compiled, is stale too.
    native.MANIFEST.write_text("{}")
    assert native.status()[0] == "stale"
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native.status()[0] == "disabled"
    # Without compiled files the package is pure Python, whatever the manifest says.
    for p in native.clean():
        assert not p.exists()
    monkeypatch.delenv(native.PURE_ENV)
    assert native.status() == ("pure", [])


def test_pure_env_imports_sources() -> None:
    """With KVSIM_PURE_PYTHON=1 every listed module is imported from its ``.py``."""
    code = (
        "import importlib, kvcore\n"
        "from kvcore.native import NATIVE_MODULES\n"
        "files = [importlib.import_module(n).__file__ for n in NATIVE_MODULES]\n"
        "assert all(f.endswith('.py') for f in files), files\n"
        "print(kvcore.NATIVE_STATUS)\n"
    )
    env = dict(os.environ, **{native.PURE_ENV: "1"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() in ("pure", "disabled")


def test_source_finder_only_takes_listed_modules() -> None:
    finder = native._SourceFinder(["kvcore.block_pool", "sim.engine"])
    spec = finder.find_spec("kvcore.block_pool")
    assert spec is not None and spec.origin.endswith("kvcore/block_pool.py")
    spec = finder.find_spec("sim.engine")
    assert spec is not None and spec.origin.endswith("sim/engine.py")
    assert finder.find_spec("kvcore.request_queue") is None
    assert finder.find_spec("block_pool") is None
