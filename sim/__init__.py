"""Engine loop, runs, sweeps, planning and the kvsim CLI."""

import kvsim_native  # noqa: F401  # first: its guard decides whether compiled modules load
