"""``python -m kvsim_native {build,status,clean}``: the compiled build of the hot
modules, which installing kvsim makes; ``build`` makes it again in place (after editing
a source, without reinstalling; needs the ``native`` extra)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from kvsim_native.guard import clean, status


def main(argv: Sequence[str] | None = None) -> int:
    """Build, report or remove the compiled modules; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "status"
    if command == "build":
        from kvsim_native.build import build

        build()
    elif command == "clean":
        for p in clean():
            print(f"removed {p}")
        return 0
    elif command != "status":
        print(
            f"usage: python -m kvsim_native {{build,status,clean}} (got {command!r})",
            file=sys.stderr,
        )
        return 2
    state, details = status()
    print(f"compiled modules: {state}" + (f" ({', '.join(details)})" if details else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
