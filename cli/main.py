"""The ``mmtok`` command: a Typer app whose commands are thin wrappers over the library."""

from __future__ import annotations

import typer

from mmtok.cli.demo import demo
from mmtok.cli.eval_cmd import eval_app
from mmtok.cli.inspect import inspect
from mmtok.cli.plan import plan
from mmtok.cli.price import models, price
from mmtok.cli.prices import prices_app
from mmtok.cli.shrink import shrink
from mmtok.cli.tokenize import detokenize, tokenize
from mmtok.cli.train import train_app
from mmtok.cli.truncate import truncate

app = typer.Typer(
    name="mmtok",
    help="Count, price, shrink and plan the tokens of images, audio, video and text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command and group takes -h
)


def _print_version(value: bool) -> None:
    if value:
        import mmtok

        typer.echo(f"mmtok {mmtok.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Count, price, shrink and plan the tokens of images, audio, video and text."""


app.command()(inspect)
app.command()(demo)
app.command()(price)
app.command()(models)
app.command()(tokenize)
app.command()(detokenize)
app.command()(truncate)
app.command()(shrink)
app.command()(plan)
app.add_typer(prices_app, name="prices")
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")


@app.command()
def version() -> None:
    """Print the installed mmtok version."""
    import mmtok

    typer.echo(mmtok.__version__)


if __name__ == "__main__":
    app()
