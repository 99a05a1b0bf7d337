"""The ``mmtok`` command: a Typer app whose commands are thin wrappers over the library."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import click
import typer

from mmtok.cli.common import print_error
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
from mmtok.errors import MmtokError

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
    warnings.showwarning = _one_line_warning


def _one_line_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    """A library's warning (Pillow's DecompressionBombWarning, ...) as one ``warning:`` line, not Python's two."""
    from mmtok.cli.common import print_warning

    if issubclass(category, (DeprecationWarning, PendingDeprecationWarning)):
        return  # for developers of the libraries, not for the user of the command
    print_warning(f"{category.__name__}: {message}")


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


def _guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` that ends in one ``error:`` line and exit 1 on anything it did not handle: never a traceback.
    Usage errors and exits pass through as they are."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except MmtokError as e:
            print_error(e)
            raise typer.Exit(1) from None
        except Exception as e:  # the last line of defence
            print_error(f"unexpected {type(e).__name__}: {e} (a bug in mmtok: please report it)")
            raise typer.Exit(1) from None

    return run


for _typer in (app, prices_app, train_app, eval_app):
    for _info in _typer.registered_commands:
        _info.callback = _guarded(_info.callback)


if __name__ == "__main__":
    app()
