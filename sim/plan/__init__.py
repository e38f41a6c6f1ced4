"""Capacity planning (``kvsim plan``): bisection over a rate, a replica count or a KV
knob, several seeds per probe, every probe's runs kept. See ``sim.plan.spec`` for the
plan schema and ``sim.plan.search`` for the search."""

from sim.plan.runner import run_plan
from sim.plan.spec import PlanError, PlanSpec, load_plan

__all__ = ["PlanError", "PlanSpec", "load_plan", "run_plan"]
