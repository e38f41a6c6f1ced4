"""The oracle leaves no temporary files behind: its tiny model's and draft models'
config directories are removed when its process exits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sim.conformance.differential import DEFAULT_VLLM_PYTHON

ROOT = Path(__file__).resolve().parents[2]

needs_vllm = pytest.mark.skipif(
    not DEFAULT_VLLM_PYTHON.exists(),
    reason="oracle environment .venv-vllm (vLLM 0.33.0) missing; "
    "create it with scripts/setup_vllm_oracle.sh",
)

_MAKE_DIRS = (
    "from sim.conformance import oracle_config as c\n"
    "dirs = [c.model_dir(), c.draft_model_dir('eagle'), c.draft_model_dir('eagle3')]\n"
    "import os\n"
    "assert all(os.path.isfile(os.path.join(d, 'config.json')) for d in dirs)\n"
    "print('\\n'.join(dirs))\n"
)


@needs_vllm
def test_oracle_model_dirs_are_removed_at_exit(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [str(DEFAULT_VLLM_PYTHON), "-c", _MAKE_DIRS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    made = [Path(line) for line in done.stdout.split()]
    assert len(made) == 3 and all(p.parent == tmp_path for p in made)
    assert not any(p.exists() for p in made)
    assert not list(tmp_path.glob("kvsim-oracle-*"))  # (torch keeps a cache dir of its own)
