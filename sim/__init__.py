"""Engine loop, runs, sweeps, planning and the kvsim CLI."""

import kvcore  # noqa: F401  # first: its guard decides whether compiled modules load
