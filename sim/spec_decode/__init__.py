"""Speculative decoding in the simulator (``--speculative-config``).

:mod:`sim.spec_decode.config` (the settings), :mod:`sim.spec_decode.acceptance` (how
many drafts are accepted), :mod:`sim.spec_decode.drafter` (the drafter's cost),
:mod:`sim.spec_decode.engine` (the engine's side: samples, drafts),
:mod:`sim.spec_decode.setup` (resolution and the summary block). The scheduler's side
is kvcore's (:mod:`kvcore.spec_decode`, :mod:`kvcore.scheduler`).
"""
