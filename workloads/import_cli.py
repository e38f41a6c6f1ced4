"""Write a kvsim workload YAML rebuilt from a benchmark's settings.

    python -m workloads.import_cli vllm-bench [--out FILE] -- --request-rate 8 ...
    python -m workloads.import_cli inference-perf CONFIG.yaml [--out FILE]

The YAML goes to ``--out`` (else standard output); its header comments name the
source and what kvsim does not model. Bad input: one line on standard error, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from workloads.errors import WorkloadError
from workloads.import_inference_perf import inference_perf_workload
from workloads.import_vllm_bench import vllm_bench_workload
from workloads.imported import ImportedWorkload


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.import_cli", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="source", required=True)
    bench = sub.add_parser("vllm-bench", help="`vllm bench serve` options (after --)")
    bench.add_argument("--out", type=Path, help="the YAML file to write (default: stdout)")
    bench.add_argument("options", nargs=argparse.REMAINDER, help="vllm bench serve options")
    perf = sub.add_parser("inference-perf", help="an inference-perf config YAML")
    perf.add_argument("config", type=Path, help="the inference-perf config file")
    perf.add_argument("--out", type=Path, help="the YAML file to write (default: stdout)")
    return parser


def _read_config(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkloadError(str(path), "", f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise WorkloadError(str(path), "", f"YAML syntax error: {exc}") from None


def build(args: argparse.Namespace) -> ImportedWorkload:
    """The imported workload the parsed command line asks for."""
    if args.source == "vllm-bench":
        options = list(args.options)
        if options[:1] == ["--"]:
            options = options[1:]
        return vllm_bench_workload(options)
    return inference_perf_workload(_read_config(args.config), str(args.config))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 0 on success, 2 on bad input."""
    args = _parser().parse_args(argv)
    try:
        text = build(args).to_yaml()
    except WorkloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
