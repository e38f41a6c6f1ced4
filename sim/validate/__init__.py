"""Validation against real vLLM measurements: serving runs (request times) and start-ups
(KV block budgets)."""
