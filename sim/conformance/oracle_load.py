"""Loading the oracle's files by path: the one loader every oracle driver uses.

The drivers (``vllm_driver.py``, ``pd_driver.py``, ``offload_driver.py``) run under the
oracle environment's interpreter, where kvsim is no package. Each imports this file by
its plain name (a script's own folder is the first entry of ``sys.path``) and loads
every other file through :func:`load_by_path`: its siblings here (``oracle_config.py``,
``oracle_steps.py``, ...) and kvsim's standard-library-only modules (e.g.
``kvcore/replay_spec.py``). A file is executed once per process, as module
``kvsim_oracle_<file name>``: a driver and the modules it loads share one module
object per file, so a class such as ``HeldOutputExecutor`` is the same class object
everywhere.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))


def load_by_path(*parts: str) -> ModuleType:
    """The module of the file at ``parts`` relative to this folder (a sibling's file
    name, or e.g. ``os.pardir, os.pardir, "kvcore", "replay_spec.py"``), executed on
    the first call and kept in ``sys.modules``."""
    path = os.path.join(HERE, *parts)
    name = "kvsim_oracle_" + os.path.splitext(parts[-1])[0]
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
