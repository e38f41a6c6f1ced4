"""Conformance tooling: drivers that run vLLM's own core as an oracle for kvcore."""

DEFAULT_SEED = 20240607  # seed of `kvsim conformance` and the differential test suite
