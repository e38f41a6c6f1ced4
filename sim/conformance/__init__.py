"""Conformance tooling: drivers that run vLLM's own core as an oracle for kvcore."""
