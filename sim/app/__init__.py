"""What the commands do, apart from their options (:mod:`sim.cli` holds those).

- :mod:`sim.app.run`: a run from its :class:`~sim.app.run.RunSpec` to its run
  directory (``simulate``, ``run``); :mod:`sim.app.setup` resolves a spec (workload,
  model, GPU, engine settings, KV budget) into what the engine is built from.
- :mod:`sim.app.run_command`, :mod:`sim.app.budget_command`,
  :mod:`sim.app.replay_command`, :mod:`sim.app.list_command`: ``kvsim run``,
  ``budget``, ``replay`` and ``list`` from their flags, with one message and exit
  status 2 for bad input.
- :mod:`sim.app.outdir`: output directories that never overwrite a user's files;
  :mod:`sim.app.progress`: the progress line; :mod:`sim.app.work_bounds`: runs too
  large for one machine, refused before they start.
"""
