"""The ``kvsim`` command line (typer).

Exit status: 0 on success, 2 on bad input (one message on stderr, no traceback),
1 on an internal error.
"""

from __future__ import annotations

import typer

from kvcore import VLLM_VERSION, __version__

app = typer.Typer(
    name="kvsim", no_args_is_help=True, add_completion=False,
    help="Capacity planning for vLLM-style LLM serving, on vLLM V1's own KV-cache and "
    f"scheduling logic (mirrors vLLM {VLLM_VERSION}).")


@app.callback()
def _root() -> None:
    """kvsim: simulate vLLM replicas block for block."""


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                      "help_option_names": []},
    add_help_option=False,
    help="Replay a step-indexed trace through kvcore's V1 scheduler with a fake model; "
    "one JSON line per step. Run `kvsim replay --help` for the knobs.")
def replay(ctx: typer.Context) -> None:
    from kvcore.replay_cli import main as replay_main

    raise typer.Exit(replay_main(list(ctx.args), prog="kvsim replay"))


@app.command()
def version() -> None:
    """Print kvsim's version and the vLLM version kvcore mirrors."""
    typer.echo(f"kvsim {__version__} (kvcore mirrors vLLM {VLLM_VERSION})")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
