"""The ``mmtok`` command: a Typer app whose commands are thin wrappers over the library."""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import click
import typer
import typer.core

from mmtok.cli.common import input_folders, print_error, stdin_inputs
from mmtok.cli.examples import epilog
from mmtok.errors import MmtokError
from mmtok.extras import as_missing_extra

# name -> (module, attribute): the commands, then the command groups, in the order help lists them. The names are
# this package's own; nothing a user passes chooses a module.
COMMANDS = {
    "inspect": ("mmtok.cli.inspect", "inspect"),
    "demo": ("mmtok.cli.demo", "demo"),
    "price": ("mmtok.cli.price", "price"),
    "models": ("mmtok.cli.models", "models"),
    "tokenize": ("mmtok.cli.tokenize", "tokenize"),
    "detokenize": ("mmtok.cli.tokenize", "detokenize"),
    "truncate": ("mmtok.cli.truncate", "truncate"),
    "shrink": ("mmtok.cli.shrink", "shrink"),
    "plan": ("mmtok.cli.plan", "plan"),
    "proxy": ("mmtok.cli.proxy", "proxy"),
    "ledger": ("mmtok.cli.ledger", "ledger"),
    "calibrate": ("mmtok.cli.calibrate", "calibrate"),
    "mcp": ("mmtok.cli.mcp", "mcp"),
    "hook": ("mmtok.cli.hook", "hook"),
    "version": ("mmtok.cli.main", "version"),
}
GROUPS = {
    "prices": ("mmtok.cli.prices", "prices_app"),
    "train": ("mmtok.cli.train", "train_app"),
    "eval": ("mmtok.cli.eval_cmd", "eval_app"),
}
# Commands an agent waits for: run as the ``mmtok`` process, it ends as soon as the command is done (``_end_now``).
ENDS_AT_ONCE = ("hook",)


class HelpfulCommand(typer.core.TyperCommand):
    """A command whose help keeps every option name and choice whole at any width and ends with its examples
    (:mod:`mmtok.cli.help`, imported only when help is shown)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.rich_markup_mode is None:
            return super().format_help(ctx, formatter)
        from mmtok.cli.help import format_help

        format_help(self, ctx, self.rich_markup_mode)


class HelpfulGroup(typer.core.TyperGroup):
    """A command group whose help is drawn as :class:`HelpfulCommand`'s."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.rich_markup_mode is None:
            return super().format_help(ctx, formatter)
        from mmtok.cli.help import format_help

        format_help(self, ctx, self.rich_markup_mode)


class MmtokApp(typer.Typer):
    """mmtok's Typer app, which registers its commands when they are first needed.

    Run as the ``mmtok`` command with a command or group named first (``mmtok price ...``), it registers that one
    alone: the others are neither imported nor made into Click commands, about a fifth of a warm start-up. Anything
    else (no command, ``--help``, ``-V``, a misspelt name) and every other use of the app (Typer's ``get_command``,
    the test runner) sees all of them."""

    def __init__(self, **options: Any) -> None:
        self._wanted: set[str] | None = None  # while a lazy call runs: the one name it needs
        self._registered: set[str] = set()
        super().__init__(**options)

    @property
    def registered_commands(self) -> list[Any]:
        self._load()
        return self._commands

    @registered_commands.setter
    def registered_commands(self, value: list[Any]) -> None:
        self._commands = value

    @property
    def registered_groups(self) -> list[Any]:
        self._load()
        return self._groups

    @registered_groups.setter
    def registered_groups(self, value: list[Any]) -> None:
        self._groups = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = sys.argv[1] if len(sys.argv) > 1 else None
        lazy = not args and "args" not in kwargs and (named in COMMANDS or named in GROUPS)
        self._wanted = {named} if lazy else None  # type: ignore[assignment]
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as e:
            if lazy and named in ENDS_AT_ONCE:
                _end_now(e.code)
            raise
        finally:
            self._wanted = None  # any later use of the app sees every command

    def _load(self) -> None:
        """Register what is wanted (everything, outside a lazy call) and not registered yet, in help's order, each
        with its examples (:data:`mmtok.cli.examples.EXAMPLES`) as its help's epilog."""
        if not hasattr(self, "_groups"):  # still in Typer's __init__
            return
        wanted = set(COMMANDS) | set(GROUPS) if self._wanted is None else self._wanted
        missing = wanted - self._registered
        if not missing:
            return
        self._registered |= missing
        if self._commands or self._groups:  # a lazy call registered some: start again, in order
            self._commands, self._groups = [], []
            missing = set(self._registered)
        for name, (module, attribute) in COMMANDS.items():
            if name in missing:
                command = _guarded(getattr(importlib.import_module(module), attribute), f"mmtok {name}")
                self.command(name=name, cls=HelpfulCommand, epilog=epilog(name))(command)
        for name, (module, attribute) in GROUPS.items():
            if name in missing:
                group = getattr(importlib.import_module(module), attribute)
                for info in group.registered_commands:
                    full_name = f"{name} {info.name or typer.main.get_command_name(info.callback.__name__)}"
                    info.callback = _guarded(info.callback, f"mmtok {full_name}")
                    info.cls = HelpfulCommand
                    info.epilog = epilog(full_name)
                self.add_typer(group, name=name, cls=HelpfulGroup, epilog=epilog(name))


def _end_now(code: int | str | None) -> NoReturn:
    """End the process with ``code`` (``sys.exit``'s meaning) once its exit functions have run and its output is
    flushed, without the interpreter's finalisation: freeing onnxruntime's sessions and every module object by object
    took 0.12-0.15 s after the hook's answer was written (measured 2026-12-05, 2-core machine), time the agent waits
    for. A command listed in ``ENDS_AT_ONCE`` has finished its own threads' work (the hook waits for its networks'
    loading, which writes to the cache) before it returns."""
    import atexit
    import os

    if isinstance(code, str):
        print(code, file=sys.stderr)
    atexit._run_exitfuncs()  # what a normal exit runs too: the JSON lines' flush, a stand-in cache's removal
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that left, a closed stream: nothing more to say
            stream.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


app = MmtokApp(
    name="mmtok",
    help="Count, price, shrink and plan the tokens of images, audio, video and text.",
    no_args_is_help=True,
    cls=HelpfulGroup,
    epilog=epilog(""),
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


def version() -> None:
    """Print the installed mmtok version."""
    import mmtok

    typer.echo(mmtok.__version__)


def _guarded(command: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``command`` (``name``: ``mmtok price``) that ends in one ``error:`` line and exit 1 on anything it did not
    handle: never a traceback. Usage errors and exits pass through as they are; Ctrl-C is one line and exit 130; a
    module of an extra that is not installed is one line naming the extra (:mod:`mmtok.extras`) and exit 2. While
    it runs, the folders among its inputs (the argument ``paths`` or ``inputs``) name the files found in them in its
    tables (:func:`mmtok.cli.common.input_folders`), and an input named ``-`` is what was piped into stdin
    (:func:`mmtok.cli.common.stdin_inputs`): one that cannot be read is one error line, and exit 1 after the other
    inputs."""
    if getattr(command, "_mmtok_guarded", False):
        return command

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            with stdin_inputs(kwargs) as refused, input_folders(kwargs.get("paths") or kwargs.get("inputs")):
                for reason in refused:
                    print_error(reason)
                result = command(*args, **kwargs)
            if refused:
                raise typer.Exit(1)
            return result
        except (click.exceptions.ClickException, click.exceptions.Exit):
            raise
        except (KeyboardInterrupt, click.exceptions.Abort):  # Ctrl-C: one line and 130, the shell's convention
            print_error("interrupted (Ctrl-C): what was finished is kept; what was under way is not")
            raise typer.Exit(130) from None
        except ImportError as e:
            missing = as_missing_extra(e, name)
            if missing is None:
                print_error(f"unexpected {type(e).__name__}: {e} (a bug in mmtok: please report it)")
                raise typer.Exit(1) from None
            print_error(missing)
            raise typer.Exit(2) from None
        except MmtokError as e:
            print_error(e)
            raise typer.Exit(1) from None
        except Exception as e:  # the last line of defence
            print_error(f"unexpected {type(e).__name__}: {e} (a bug in mmtok: please report it)")
            raise typer.Exit(1) from None

    run._mmtok_guarded = True  # type: ignore[attr-defined]
    return run


if __name__ == "__main__":
    app()
