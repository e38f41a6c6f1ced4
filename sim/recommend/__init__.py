"""``kvsim recommend``: from "does this configuration hold?" to "what should I deploy?".

Modules: :mod:`~sim.recommend.spec` (the spec), :mod:`~sim.recommend.space` (the
candidates), :mod:`~sim.recommend.bounds` (analytic bounds),
:mod:`~sim.recommend.schedule` (branch and bound in processes),
:mod:`~sim.recommend.evaluate` (one candidate's plan search),
:mod:`~sim.recommend.searching` (the search over the candidates),
:mod:`~sim.recommend.verify` (whole-cluster checks), :mod:`~sim.recommend.cluster_checks`
(the checks of the top candidates), :mod:`~sim.recommend.runner` (the whole run).
Nothing is imported here, so ``kvsim --help`` stays fast.
"""
