"""torch stays out of the simulator's import path."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_simulator_imports_without_torch(tmp_path):
    code = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "triton"):
                    raise ImportError(f"{name} is blocked in this test")
                return None

        sys.meta_path.insert(0, Block())
        import sim, sim.app.setup, sim.app.budget_command, kvcore, workloads
        import calibrate.latency, calibrate.calibration_file, calibrate.profile_run
        import calibrate.fit, calibrate.use_calibration, calibrate.harness.profile_sweep
        from sim.cli import main
        assert not any(m.split(".")[0] in ("torch", "triton") for m in sys.modules)
        try:
            import torch  # noqa: F401
        except ImportError:
            print("blocked-ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "blocked-ok" in res.stdout
