"""What the commands do, apart from their options (:mod:`sim.cli` holds those).

- :mod:`sim.app.run`: a run from its :class:`~sim.app.run.RunSpec` to its run
  directory (``run``: staging and commit, ``config.yaml``); :mod:`sim.app.simulate`
  builds and runs the simulation (recorders, cluster, workload, summary);
  :mod:`sim.app.setup` resolves a spec (workload,
  model, GPU, engine settings, KV budget) into what the engine is built from.
- :mod:`sim.app.run_command`, :mod:`sim.app.budget_command`,
  :mod:`sim.app.replay_command`, :mod:`sim.app.list_command`: ``kvsim run``,
  ``budget``, ``replay`` and ``list`` from their flags, with one message and exit
  status 2 for bad input (the run's table in :mod:`sim.app.run_table`).
- :mod:`sim.app.outdir`: output directories that never overwrite a user's files (the
  marker that says whose a directory is in :mod:`sim.app.outdir_marker`);
  :mod:`sim.app.progress`: the progress line; :mod:`sim.app.work_bounds`: runs too
  large for one machine, refused before they start.
"""
