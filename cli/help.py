"""How ``mmtok ... --help`` is drawn: Typer's Rich help with two changes, imported only when help is shown.

Typer lays an options panel out as seven columns (required mark, long names, short names, negative long and short
names, metavar, help) and lets Rich shrink them all when the terminal is narrow; Rich cuts what no longer fits with
an ellipsis, so at 80 columns ``tokenize --help`` showed ``--tokens-per-s…`` and ``price --help`` ``ultra_…``.
Here a panel has two columns: the option's names and metavar, never wrapped (a long metavar goes on a line of its
own), and its help, which takes the rest and folds a word longer than the column rather than cut it.

Typer also joins an epilog's lines into paragraphs; a command's examples (:mod:`mmtok.cli.examples`, its epilog)
are printed last, one line each, in a panel of their own.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer import rich_utils

NAMES_WIDTH = 30  # names and metavar share a line up to this many columns; a longer metavar takes the next line
EXAMPLES_TITLE = "Examples"


def format_help(command: click.Command, ctx: click.Context, markup_mode: Any) -> None:
    """Print ``command``'s help as Typer does, with mmtok's options panel and its examples at the end."""
    rich_utils._print_options_panel = _options_panel  # Typer looks it up when it draws each panel
    epilog, command.epilog = command.epilog, None
    try:
        rich_utils.rich_format_help(obj=command, ctx=ctx, markup_mode=markup_mode)
    finally:
        command.epilog = epilog
    if epilog:
        _examples_panel(epilog, rich_utils._get_rich_console())


def _options_panel(
    *, name: str, params: list[click.Parameter], ctx: click.Context, markup_mode: Any, console: Console
) -> None:
    """One panel of options or arguments: names and metavar whole on the left, help on the right."""
    if not params:
        return
    table = Table(show_header=False, box=None, expand=True, pad_edge=False, padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(ratio=1, overflow="fold")
    for param in params:
        help_text = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
        table.add_row(_names(param, ctx), help_text)
    console.print(Panel(table, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name, title_align="left"))


def _names(param: click.Parameter, ctx: click.Context) -> Text:
    """``--long, -s METAVAR`` (the metavar on a line of its own when the line would pass NAMES_WIDTH), then the
    negative names (``--no-x``) on their own line, styled as Typer styles them."""
    if isinstance(param, click.Argument):
        first = param.human_readable_name.lower()
    else:
        first = ", ".join(sorted(param.opts, key=lambda opt: not opt.startswith("--")))
    lines = [rich_utils.highlighter(Text(first))]
    metavar = _metavar(param, ctx)
    if metavar and len(first) + 1 + len(metavar) <= NAMES_WIDTH:
        lines[0].append(" ").append(metavar, style=rich_utils.STYLE_METAVAR)
    elif metavar:
        lines.append(Text("  ").append(metavar, style=rich_utils.STYLE_METAVAR))
    if param.secondary_opts:
        lines.append(rich_utils.negative_highlighter(Text(", ".join(param.secondary_opts))))
    return Text("\n").join(lines)


def _metavar(param: click.Parameter, ctx: click.Context) -> str:
    """The value a parameter takes (``PATH``, ``INTEGER RANGE [x>=1]``), as Typer shows it; none for a flag."""
    metavar = param.make_metavar(ctx=ctx)
    if isinstance(param, click.Argument) and param.name and metavar == param.name.upper():
        metavar = param.type.name.upper()
    if metavar == "BOOLEAN" or (isinstance(param, click.Option) and param.is_flag):
        return ""
    if isinstance(param, click.Option) and isinstance(param.type, click.types._NumberRangeBase):
        described = param.type._describe_range()
        if described:
            metavar += f" [{described}]"
    return metavar


def _examples_panel(epilog: str, console: Console) -> None:
    """The examples of :func:`mmtok.cli.examples.epilog`, line for line: Typer would join them into a paragraph."""
    lines = epilog.splitlines()
    if lines and lines[0].rstrip(":") == EXAMPLES_TITLE:
        lines = lines[1:]
    body = Text("\n").join(Text(line) for line in lines)
    console.print(
        Panel(body, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=EXAMPLES_TITLE, title_align="left")
    )
