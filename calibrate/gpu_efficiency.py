"""The roofline efficiency factors the catalog ships for a GPU, where a real run of it
was fitted (``calibrate/catalog/efficiency/*.yaml``: ``kvsim calibrate --from-trace``
files, each with the runs it was fitted on and its errors).

A run on a GPU without ``--calibration`` takes these factors when the catalog has a file
for that GPU and the file's GPU spec is the run's, figure for figure (a GPU YAML that
changes any figure describes other hardware, and gets the generic factors:
:class:`calibrate.roofline.RooflineEfficiency`'s defaults, fitted on Vidur's A100
operator timings). ``tests/test_gpu_efficiency.py`` checks every shipped file against
its catalog GPU.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from calibrate.catalog import CATALOG_DIR
from calibrate.efficiency_file import EfficiencyCalibration, load_efficiency
from calibrate.gpu_spec import GPUSpec
from calibrate.roofline import RooflineEfficiency

EFFICIENCY_DIR = CATALOG_DIR / "efficiency"


@lru_cache(maxsize=1)
def shipped_efficiency() -> dict[str, tuple[EfficiencyCalibration, Path]]:
    """``{lowercase GPU name: (efficiency file, its path)}`` of the catalog's files."""
    out = {}
    for path in sorted(EFFICIENCY_DIR.glob("*.yaml")):
        cal = load_efficiency(path)
        out[cal.gpu.name.lower()] = (cal, path)
    return out


def gpu_efficiency(gpu: GPUSpec) -> tuple[RooflineEfficiency, str] | None:
    """``(factors, source)`` the catalog ships for ``gpu`` (``source``: the file, relative
    to the catalog), or None when it ships none for exactly this spec."""
    found = shipped_efficiency().get(gpu.name.lower())
    if found is None or found[0].gpu != gpu:
        return None
    cal, path = found
    return cal.factors(), str(path.relative_to(CATALOG_DIR.parent.parent))
