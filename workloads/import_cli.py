"""Write a kvsim workload YAML rebuilt from a benchmark's settings.

    kvsim import-workload vllm-bench [--out FILE [--force]] -- --request-rate 8 ...
    kvsim import-workload inference-perf CONFIG.yaml [--out FILE [--force]]

(or ``python -m workloads.import_cli`` with the same arguments).

The YAML goes to ``--out`` (else standard output); its header comments name the
source and what kvsim does not model; an existing ``--out`` file is replaced only when
this command wrote it (or with ``--force``). Bad input: one line on standard error,
exit 2.
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
from workloads.imported import HEADER, ImportedWorkload

FORCE = "replace an existing --out file that this command did not write"


def _ours(path: Path) -> bool:
    """Whether ``path`` is a YAML this command wrote (its first line is :data:`HEADER`)."""
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline().startswith(HEADER)
    except (OSError, UnicodeDecodeError):
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.import_cli", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="source", required=True)
    bench = sub.add_parser("vllm-bench", help="`vllm bench serve` options (after --)")
    bench.add_argument("--out", type=Path, help="the YAML file to write (default: stdout)")
    bench.add_argument("--force", action="store_true", help=FORCE)
    bench.add_argument("options", nargs=argparse.REMAINDER, help="vllm bench serve options")
    perf = sub.add_parser("inference-perf", help="an inference-perf config YAML")
    perf.add_argument("config", type=Path, help="the inference-perf config file")
    perf.add_argument("--out", type=Path, help="the YAML file to write (default: stdout)")
    perf.add_argument("--force", action="store_true", help=FORCE)
    return parser


def passed_through(source: str, args: list[str]) -> list[str]:
    """``kvsim import-workload``'s arguments as ``workloads.import_cli`` takes them: the command
    line parser took ``--``, so vllm bench serve's options go after a new one, with
    ``--out FILE`` and ``--force`` kept before it."""
    if source != "vllm-bench":
        return args
    own: list[str] = []
    rest = list(args)
    while rest:
        if rest[0] == "--force":
            own.append(rest.pop(0))
        elif rest[0] == "--out" and len(rest) > 1:
            own += [rest.pop(0), rest.pop(0)]
        elif rest[0].startswith("--out="):
            own.append(rest.pop(0))
        else:
            break
    return [*own, "--", *rest]


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
        return 0
    if args.out.is_dir() or (args.out.exists() and not args.force and not _ours(args.out)):
        what = "is a directory" if args.out.is_dir() else "exists and was not written by kvsim"
        print(
            f"error: --out {args.out}: {what}; name another file"
            + ("" if args.out.is_dir() else " or pass --force to replace it"),
            file=sys.stderr,
        )
        return 2
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
