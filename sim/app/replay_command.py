"""``kvsim replay``: a step-indexed trace through kvcore's scheduler, as JSON lines.

Knobs use vLLM's engine-argument names (:class:`kvcore.replay.ReplayConfig` holds
them). Bad input (an unreadable or invalid trace, a knob out of range): one
``kvsim: error: ...`` line on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

from kvcore.replay import ReplayConfig, replay
from kvcore.replay_trace import load_trace

GROUP_ALIASES = {
    "sliding": "sliding_window",
    "swa": "sliding_window",
    "local": "chunked_local",
    "chunked": "chunked_local",
}
"""Short spellings accepted by ``--kv-groups``."""


def _fail(message: str) -> int:
    print(f"kvsim: error: {message}", file=sys.stderr)
    return 2


def replay_config(knobs: dict[str, Any]) -> ReplayConfig:
    """The :class:`ReplayConfig` of the command's knobs (``kv_groups`` a comma-separated
    string). Raises ValueError on a bad value."""
    kwargs = dict(knobs)
    groups = kwargs.pop("kv_groups")
    kwargs["kv_groups"] = tuple(GROUP_ALIASES.get(g.strip(), g.strip()) for g in groups.split(","))
    return ReplayConfig(**kwargs)


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory."""
    out_dir = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".replay-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def replay_command(trace: str, out: str, knobs: dict[str, Any]) -> int:
    """Replay ``trace`` with ``knobs``; write the JSON lines to ``out`` ("-": stdout).
    Returns the exit status (0, or 2 on bad input)."""
    try:
        config = replay_config(knobs)
        requests = load_trace(trace)
        lines = [json.dumps(rec) for rec in replay(requests, config, trace)]
    except ValueError as e:
        return _fail(str(e))
    text = "\n".join(lines) + "\n"
    if out == "-":
        sys.stdout.write(text)
        return 0
    try:
        write_atomically(out, text)
    except OSError as e:
        return _fail(f"--out {out}: cannot write: {e.strerror}")
    return 0
