"""Workloads for kvsim: YAML specs, presets and traces, replayed as a SimPy process.

Public API::

    load_workload(spec, *, seed=None, overrides=None) -> Workload  # preset, YAML or trace
    WorkloadOverrides(rate, num_requests, duration_s)  # kvsim run --rate/--num-requests/...
    list_presets() -> list[str]
    Workload.start(env, submit) / on_finish(request_id, output_token_ids, now) / done()
    SimRequest                                         # what ``submit`` receives
    WorkloadError                                      # every bad input
"""

# First: importing kvsim_native installs the guard that decides whether compiled modules load.
import kvsim_native  # noqa: F401
from workloads.analysis import expected_prefix_hit_fraction
from workloads.errors import WorkloadError
from workloads.loader import list_presets, load_spec, load_workload, preset_description
from workloads.overrides import WorkloadOverrides
from workloads.process import Workload
from workloads.request import SimRequest
from workloads.spec import WorkloadSpec
from workloads.synthetic import SyntheticWorkload
from workloads.trace_workload import TraceWorkload
from workloads.traces import TraceTable, read_trace

__all__ = [
    "SimRequest",
    "SyntheticWorkload",
    "TraceTable",
    "TraceWorkload",
    "Workload",
    "WorkloadError",
    "WorkloadOverrides",
    "WorkloadSpec",
    "expected_prefix_hit_fraction",
    "list_presets",
    "load_spec",
    "load_workload",
    "preset_description",
    "read_trace",
]
