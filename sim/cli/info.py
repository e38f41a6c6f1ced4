"""``kvsim list`` (the bundled catalog; :mod:`sim.app.list_command`) and ``kvsim version``."""

from __future__ import annotations

import typer

from kvcore import VLLM_VERSION, __version__


def list_catalog() -> None:
    """Bundled workload presets, models and GPUs, one line each."""
    from sim.app.list_command import list_command

    raise typer.Exit(list_command())


def version() -> None:
    """Print kvsim's version, the vLLM version kvcore mirrors, and which build of the
    hot modules runs (compiled or pure Python)."""
    from kvsim_native import BUILD_LABELS, NATIVE_STATUS

    typer.echo(f"kvsim {__version__} (kvcore mirrors vLLM {VLLM_VERSION})")
    typer.echo(f"hot modules: {BUILD_LABELS[NATIVE_STATUS]}")
