"""Regenerate the report screenshots in docs/img/ (run, sweep and plan reports).

    python scripts/report_screenshots.py [--out docs/img] [--keep DIR]

Runs three small kvsim jobs with this checkout's code (a few minutes on two CPUs):

- run: the chat preset on Llama-3.1-8B / H100-SXM with a KV cache cut to 1,200
  blocks (``--num-gpu-blocks-override 1200 --max-model-len 4096``), so the KV cache
  fills, requests wait and some are preempted;
- sweep: the bundled ``workloads/sweeps/chat-qps.yaml`` at 30% of its length with
  SLOs added (TTFT p90 <= 500 ms, TPOT p99 <= 50 ms);
- plan: ``max_rate`` on chat with the same SLOs, one seed, 300-request probe runs;

then screenshots each ``report.html`` with headless Chromium (``chromium``,
``chromium-browser`` or ``google-chrome`` on the PATH; Debian: ``apt-get install -y
chromium``) and stores it as an optimized PNG (a few hundred kB at most).
``--keep DIR`` keeps the run, sweep and plan directories there (default: a temporary
directory, removed at the end); ``--reports-from DIR`` skips the jobs and re-renders
(``kvsim report``) the ones an earlier ``--keep DIR`` left, then shoots them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SLO = {"ttft_p90_s": 0.5, "tpot_p99_s": 0.05}
SHOTS = {"run": (1400, 2050), "sweep": (1400, 2000), "plan": (1400, 1500)}
"""Report -> browser window (width, height) in pixels: the top of each page."""
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def kvsim(*args: str, cwd: Path) -> None:
    """One kvsim command with this checkout's code; exits on failure."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "sim.cli", *args]
    print("+ kvsim " + " ".join(args), flush=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.exit(f"report_screenshots: kvsim {args[0]} failed (exit {done.returncode})")


def make_reports(work: Path) -> dict[str, Path]:
    """Run the three jobs under ``work``; return each report.html."""
    kvsim(
        "run",
        "chat",
        "--num-gpu-blocks-override",
        "1200",
        "--max-model-len",
        "4096",
        "--out",
        str(work / "run"),
        cwd=work,
    )
    spec = yaml.safe_load((REPO / "workloads" / "sweeps" / "chat-qps.yaml").read_text())
    spec["slo"] = SLO
    (work / "chat-qps.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    kvsim("sweep", str(work / "chat-qps.yaml"), "--scale", "0.3", "--out", "sweep", cwd=work)
    plan = {
        "workload": "chat",
        "question": "max_rate",
        "num_requests": 300,
        "seeds": [0],
        "slo": SLO,
        "search": {"low": 2, "high": 64, "max_probes": 8},
        "length": {"max_factor": 4},
    }
    (work / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    kvsim("plan", str(work / "plan.yaml"), "--out", "plan", cwd=work)
    return {name: work / name / "report.html" for name in SHOTS}


def browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    sys.exit(
        f"report_screenshots: no headless browser found ({', '.join(BROWSERS)}); "
        "install one, e.g. apt-get install -y chromium"
    )


def screenshot(page: Path, png: Path, size: tuple[int, int]) -> None:
    """``page`` as a PNG of the browser window's size."""
    from PIL import Image

    raw = png.with_suffix(".raw.png")
    subprocess.run(
        [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--window-size={size[0]},{size[1]}",
            f"--screenshot={raw}",
            page.resolve().as_uri(),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with Image.open(raw) as im:
        # Lossless: 256 colours lose the faint shading of the measurement window.
        im.convert("RGB").save(png, optimize=True)
    raw.unlink()
    print(f"{png}: {png.stat().st_size / 1024:,.0f} kB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "img"), help="where the PNGs go")
    parser.add_argument("--keep", default=None, help="keep the run, sweep and plan here")
    parser.add_argument(
        "--reports-from", default=None, help="re-render and shoot an earlier --keep DIR"
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    browser()  # fail before the jobs run
    if args.reports_from:
        work = Path(args.reports_from)
        for name in SHOTS:
            kvsim("report", str(work / name), cwd=work)
        pages = {name: work / name / "report.html" for name in SHOTS}
    elif args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
        pages = make_reports(work)
    else:
        with tempfile.TemporaryDirectory(prefix="kvsim-shots-") as tmp:
            pages = make_reports(Path(tmp))
            for name, page in pages.items():
                screenshot(page, out / f"{name}_report.png", SHOTS[name])
            return
    for name, page in pages.items():
        screenshot(page, out / f"{name}_report.png", SHOTS[name])


if __name__ == "__main__":
    main()
