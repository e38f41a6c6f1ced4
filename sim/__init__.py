"""Engine loop, runs, sweeps, planning and the kvsim CLI."""
