"""Errors of a simulation run (kept out of the compiled modules: mypyc compiles no
subclass of a built-in exception)."""


class SimulationStuck(RuntimeError):
    """Requests wait but none can ever be scheduled (the KV cache is too small)."""
