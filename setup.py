"""kvsim's build step: compiles the hot modules (``kvsim_native.NATIVE_MODULES``) with
mypyc, for ``pip install .`` (into the wheel) and ``pip install -e .`` (in place, beside
the sources, where ``kvsim_native``'s import-time guard looks for them), and writes the
manifest of source digests the guard checks. An editable install also writes the
package's bytecode cache, as pip does for a wheel's modules
(``kvsim_native.build.byte_compile``).

Everything else about the package is in ``pyproject.toml``. Without a working C
compiler, when mypyc fails, or with ``KVSIM_PURE_PYTHON=1`` set, the install still
succeeds, in pure Python, and prints one notice line (``kvsim version`` tells which build
runs). An editable reinstall whose compiled modules already match their sources does not
compile again.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


@functools.cache
def _native() -> tuple[ModuleType, ModuleType]:
    """``kvsim_native``'s guard and build modules, loaded by path from this tree (not an
    installed copy, nor through ``kvsim_native/__init__.py``, which would install the
    guard in this process); they need only the standard library, all that the build
    environment is sure to have."""
    package = ModuleType("kvsim_native")
    package.__path__ = [str(HERE / "kvsim_native")]
    sys.modules["kvsim_native"] = package
    for name in ("guard", "depends", "build"):  # each imports only those before it
        spec = importlib.util.spec_from_file_location(
            f"kvsim_native.{name}", HERE / "kvsim_native" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        setattr(package, name, module)
        spec.loader.exec_module(module)
    return package.guard, package.build


class CompiledDistribution(Distribution):
    """Has extension modules (a platform wheel), even before mypyc has listed them."""

    def has_ext_modules(self) -> bool:
        return True


class build_native(build_ext):
    """``build_ext`` for mypyc's extensions of ``NATIVE_MODULES``, falling back to pure
    Python with a notice when they cannot be generated or compiled.

    mypyc runs in :meth:`run` only: setuptools finalizes this command for the package's
    metadata too (``egg_info`` lists the extensions' sources), so the extensions are
    named there (``kvsim_native.build.extension_names``) and mypyc's code fills them
    in when the build runs."""

    def finalize_options(self) -> None:
        self._guard, self._build = _native()
        self._up_to_date = False
        self._fallback: str | None = None
        self._manifest: Path | None = None
        extensions: list[Extension] = []
        if (self.inplace or self.editable_mode) and self._guard.is_current():
            self._up_to_date = True
        elif os.environ.get(self._guard.PURE_ENV, "") not in ("", "0"):
            self._fallback = f"{self._guard.PURE_ENV} is set"
        else:
            extensions = [Extension(n, sources=[]) for n in self._build.extension_names()]
        self.distribution.ext_modules = extensions
        if self.parallel is None:  # the modules' small extensions beside the big one
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def run(self) -> None:
        self._build_native()
        if self.inplace or self.editable_mode:  # a wheel's modules pip compiles itself
            self._build.byte_compile(HERE)

    def _build_native(self) -> None:
        if self._up_to_date:
            self.announce("kvsim: the compiled hot modules match their sources", level=2)
            return
        inplace = bool(self.inplace)
        if inplace:
            self._guard.clean()  # an old build must not outlive a failed one
        if self._fallback is None:
            digests = self._build.source_digests()
            try:
                # type-checks and generates C (mypy's errors end in SystemExit)
                self._fill(self._build.mypyc_extensions(Path(self.build_temp).resolve() / "mypyc"))
                super().run()  # into build_lib; then beside the sources if inplace
            except (Exception, SystemExit) as exc:
                self._fallback = f"{type(exc).__name__}: {exc}"
            self.inplace = inplace  # setuptools clears it while compiling
        if self._fallback is not None:
            self._remove_built()
            print(self._build.fallback_notice(self._fallback), file=sys.stderr, flush=True)
            return
        manifest = self._guard.MANIFEST
        if not self.inplace:  # the same place in the wheel
            manifest = Path(self.build_lib) / manifest.relative_to(self._guard.ROOT)
        self._manifest = manifest
        self._build.write_manifest(self._manifest, digests)

    def _fill(self, generated: list[Extension]) -> None:
        """Give the named extensions mypyc's sources and flags."""
        by_name = {ext.name: ext for ext in generated}
        if sorted(by_name) != sorted(ext.name for ext in self.extensions):
            raise RuntimeError(f"mypyc made other extensions than expected: {sorted(by_name)}")
        for ext in self.extensions:
            public = {k: v for k, v in vars(by_name[ext.name]).items() if not k.startswith("_")}
            vars(ext).update(public)

    def _remove_built(self) -> None:
        """Remove what a failed build left, so no partial build is installed."""
        if self.inplace:
            self._guard.clean()
        for ext in self.extensions:
            built = Path(self.build_lib, self.get_ext_filename(self.get_ext_fullname(ext.name)))
            built.unlink(missing_ok=True)
        self.extensions = []

    def get_outputs(self) -> list[str]:
        outputs = list(super().get_outputs())
        if self._manifest is not None and not self.inplace:
            outputs.append(str(self._manifest))
        return outputs


setup(distclass=CompiledDistribution, cmdclass={"build_ext": build_native})
