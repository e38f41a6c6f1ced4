"""Checks of kvsim's models against measurements of real vLLM runs."""
