"""``kvsim export``, ``kvsim compare`` and ``kvsim run --export``.

Exports are written atomically (a temporary file renamed into place) and never over a
file kvsim did not write: an existing file is replaced only when it is a kvsim export
(it names ``kvsim_version``). Bad input: one ``kvsim: error:`` line, exit 2.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sim.interop.compare import Comparison, compare
from sim.interop.formats import FORMATS, check_format
from sim.interop.guidellm import build_guidellm
from sim.interop.real import read_real
from sim.interop.run_dir import RunData, read_run
from sim.interop.vllm_bench import build_vllm_bench
from sim.interop.vllm_fields import DEFAULT_METRIC_PERCENTILES


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


def parse_percentiles(text: str, flag: str = "--metric-percentiles") -> tuple[float, ...]:
    """``"50,90,99"`` as ``(50.0, 90.0, 99.0)``, as vLLM's ``--metric-percentiles``;
    ValueError naming ``flag`` when a value is not a number in [0, 100]."""
    out = []
    for item in text.split(","):
        try:
            p = float(item)
        except ValueError:
            p = -1.0
        if not 0 <= p <= 100:
            raise ValueError(f"{flag}: {item.strip()!r} is not a percentile from 0 to 100")
        out.append(p)
    return tuple(out)


def build_export(run: RunData, fmt: str, percentiles: tuple[float, ...]) -> dict[str, Any]:
    """The export of ``run`` in ``fmt`` (``vllm-bench`` or ``guidellm``), with the
    client-side times those tools measure (:meth:`RunData.client`)."""
    if fmt == "vllm-bench":
        return build_vllm_bench(run.client(), percentiles)
    return build_guidellm(run.client())


def _is_kvsim_export(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not isinstance(data, dict):
        return False
    meta = data.get("metadata")
    return "kvsim_version" in data or (isinstance(meta, dict) and "kvsim_version" in meta)


def write_json(doc: dict[str, Any], out: Path) -> None:
    """Write ``doc`` to ``out`` atomically; ValueError when ``out`` is a directory or a
    file kvsim did not write. One line, no indent, as vLLM and GuideLLM write theirs."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a directory; name a file")
    if out.exists() and not _is_kvsim_export(out):
        raise ValueError(
            f"--out {out}: exists and is not a kvsim export; kvsim never overwrites it: "
            "move it away or name another file"
        )
    text = json.dumps(doc, allow_nan=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export_command(run_dir: str, fmt: str, out: str | None, percentiles: str) -> int:
    """Body of ``kvsim export``; returns the exit status."""
    try:
        check_format(fmt, "--format")
        pcts = parse_percentiles(percentiles)
        run = read_run(run_dir)
        doc = build_export(run, fmt, pcts)
        if out == "-":
            sys.stdout.write(json.dumps(doc, allow_nan=False) + "\n")
            return 0
        path = Path(out) if out else Path(run_dir) / FORMATS[fmt]
        write_json(doc, path)
    except (ValueError, OSError) as e:
        return _fail(str(e))
    print(f"kvsim: wrote {path}", file=sys.stderr)
    return 0


def export_run(out_dir: Path, formats: list[str]) -> list[Path]:
    """``kvsim run --export``: write each format's file into the finished run directory."""
    run = read_run(out_dir)
    written = []
    for fmt in formats:
        path = out_dir / FORMATS[fmt]
        write_json(build_export(run, fmt, DEFAULT_METRIC_PERCENTILES), path)
        written.append(path)
    return written


def _fmt(x: float) -> str:
    if abs(x) >= 100 or x == int(x):
        return f"{x:,.1f}" if x != int(x) else f"{x:,.0f}"
    return f"{x:,.3f}"


def comparison_table(c: Comparison, real_path: str, sim_dir: str) -> Table:
    """The side-by-side table: figure, real, simulated, signed error."""
    t = Table(title=f"kvsim compare: real ({c.kind}) against sim")
    t.add_column("metric")
    t.add_column("real", justify="right")
    t.add_column("sim", justify="right")
    t.add_column("error", justify="right")
    for r in c.rows:
        err = r.error_pct
        t.add_row(r.label, _fmt(r.real), _fmt(r.sim), "n/a" if err is None else f"{err:+.1f}%")
    return t


def compare_command(real: str, sim_dir: str, benchmark: int, as_json: bool) -> int:
    """Body of ``kvsim compare``; returns the exit status."""
    try:
        result = read_real(real, benchmark)
        run = read_run(sim_dir)
    except (ValueError, OSError) as e:
        return _fail(str(e))
    c = compare(result, run)
    for note in c.notes:
        print(f"kvsim: warning: {note}", file=sys.stderr)
    if as_json:
        rows = [
            {"metric": r.label, "real": r.real, "sim": r.sim, "error_pct": r.error_pct}
            for r in c.rows
        ]
        doc = {"kind": c.kind, "real": real, "sim": sim_dir, "rows": rows, "notes": c.notes}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    Console(width=max(100, Console().width)).print(comparison_table(c, real, sim_dir))
    print(f"real: {real}\nsim:  {sim_dir}")
    if result.count > 1:
        print(
            f"kvsim: the file holds {result.count} results; compared number {benchmark} "
            "(--benchmark N picks another)",
            file=sys.stderr,
        )
    return 0
