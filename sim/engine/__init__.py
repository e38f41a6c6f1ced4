"""The engine: one vLLM replica's loop in simulated time and what composes it.

- :mod:`sim.engine.replica`: a replica's synchronous engine loop and its step records;
  :mod:`sim.engine.replica_async` the async-scheduling loop (vLLM's default);
  :mod:`sim.engine.replica_requests` what every loop shares (arrivals, client
  timeouts and aborts, finished requests' records); :mod:`sim.engine.replica_parts`
  what an engine is built from; :mod:`sim.engine.stretches` its fast-forward
  (:mod:`sim.engine.stretches_async` in the async loop);
  :mod:`sim.engine.step_cost` and :mod:`sim.engine.step_timing` what a step costs;
  :mod:`sim.engine.regime` whether an engine fast-forwards.
- :mod:`sim.engine.connector`: the async loop with a KV connector, for
  :mod:`sim.engine.offload` (the CPU offload tier, its worker side in
  :mod:`sim.engine.offload_worker` and its copies in :mod:`sim.engine.offload_transfers`)
  and :mod:`sim.engine.pd` (a P/D instance; the proxy in :mod:`sim.engine.pd_cluster`,
  its KV reads in :mod:`sim.engine.pd_transfers`).
- :mod:`sim.engine.cluster`: the replicas and the :mod:`sim.engine.router`, each
  replica's scheduler and engine built by :mod:`sim.engine.replica_build`;
  :mod:`sim.engine.dp_lockstep`: a MoE model's DP ranks stepping together;
  :mod:`sim.engine.simpy_internals`: the only uses of SimPy's private names.
"""
