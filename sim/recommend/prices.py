"""GPU prices (USD per GPU-hour) for ranking candidates by cost.

A price comes from the spec's ``prices`` (a mapping of GPU name to price, or the path
of a YAML file holding one; a relative path is read beside the spec file), else from
the GPU YAML's own ``price_per_gpu_hour``; a GPU without either has no price. Names
match the catalog's case-insensitively (``h100-sxm`` is ``H100-SXM``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from calibrate.catalog import CatalogError, load_gpu
from sim.recommend.spec import RecommendError, RecommendSpec


def _read_prices_file(path: Path, source: str) -> dict[str, float]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RecommendError(f"{source}: prices: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError:
        raise RecommendError(f"{path}: YAML syntax error") from None
    if not isinstance(data, dict):
        raise RecommendError(f"{path}: a prices file maps GPU names to USD per GPU-hour")
    out = {}
    for name, value in data.items():
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or value < 0 or not math.isfinite(value):
            raise RecommendError(
                f"{path}: {name}: a price must be a number >= 0 (USD per GPU-hour)"
            )
        out[str(name)] = float(value)
    return out


def price_table(spec: RecommendSpec, source: str, base_dir: Path | None) -> dict[str, float]:
    """The spec's own prices by lower-cased GPU name (empty without any)."""
    prices: Any = spec.prices
    if prices is None:
        return {}
    if isinstance(prices, str):
        path = Path(prices).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        prices = _read_prices_file(path, source)
    return {str(k).lower(): float(v) for k, v in prices.items()}


def gpu_price(gpu: str, table: dict[str, float]) -> float | None:
    """USD per GPU-hour of ``gpu`` (a catalog name or GPU YAML): the table's, else the
    GPU YAML's ``price_per_gpu_hour``, else None."""
    try:
        spec = load_gpu(gpu)
    except CatalogError:
        spec = None
    for key in (gpu.lower(), spec.name.lower() if spec is not None else None):
        if key is not None and key in table:
            return table[key]
    return spec.price_per_gpu_hour if spec is not None else None


def unknown_price_names(table: dict[str, float]) -> list[str]:
    """Names in the price table that are no catalog GPU (likely typos), sorted."""
    bad = []
    for name in table:
        try:
            load_gpu(name)
        except CatalogError:
            bad.append(name)
    return sorted(bad)
