"""YAML parsed by libyaml where PyYAML was built with it: the files every run reads
(the GPU catalog, calibration files) parse faster, with the same result (the bundled
catalog's 11 files: 2.8 ms against 23 ms, timeit, best of 3).

:func:`safe_load` answers what ``yaml.safe_load`` answers: PyYAML's C parser feeds the
same safe constructor and resolver. A document the C parser rejects is parsed again by
``yaml.safe_load``, so the error raised (its message and position) is PyYAML's own.
"""

from __future__ import annotations

from typing import Any

import yaml

_C_LOADER: Any = getattr(yaml, "CSafeLoader", None)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, parsed by libyaml when available."""
    if _C_LOADER is None:
        return yaml.safe_load(text)
    try:
        return yaml.load(text, Loader=_C_LOADER)  # noqa: S506 (the safe loader)
    except yaml.YAMLError:
        return yaml.safe_load(text)
