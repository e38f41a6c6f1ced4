"""``python -m sim.cli ARGS``: the ``kvsim`` command, as the console script runs it."""

from sim.cli import main

if __name__ == "__main__":
    main()
