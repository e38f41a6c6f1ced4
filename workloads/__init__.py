"""Workload specs, trace readers and arrival processes (not yet built)."""
