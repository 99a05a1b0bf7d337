"""``mmtok mcp``: an MCP server, so coding agents and assistants price and shrink what they read."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mmtok.cli.common import print_error, print_note
from mmtok.errors import ConfigError

if TYPE_CHECKING:
    from mmtok.config import Config

LOOPBACK = "127.0.0.1"


def mcp(
    root: list[Path] = typer.Option(
        [], "--root", "-r", help="A folder the server may read files under (repeatable; adds to the client's roots)."
    ),
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP instead of stdio."),
    host: str = typer.Option(LOOPBACK, "--host", help="With --http: the address to listen on."),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="With --http: the port."),
    model: str | None = typer.Option(None, "--model", "-m", help="The default model (else the settings' or gpt-4o)."),
    keep: list[str] = typer.Option([], "--keep", help="Default quality bars for shrink (repeatable)."),
    allow_private: bool = typer.Option(
        False, "--allow-private", help="Let URLs reach loopback, private and link-local addresses (off: refused)."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="The settings file (default: MMTOK_CONFIG or the user's)."
    ),
) -> None:
    """Serve mmtok's price, shrink, inspect and models tools over MCP (stdio, or streamable HTTP on 127.0.0.1).
    Files are read only under --root folders and the roots the client grants."""
    from mmtok.config import load_config

    try:
        settings = load_config(config).override(model=model, keep=keep, roots=root)
        _check_settings(settings)
    except ConfigError as e:
        print_error(e)
        raise typer.Exit(2) from None
    missing = [str(r) for r in settings.roots if not r.is_dir()]
    if missing:
        print_error(f"--root {missing[0]}: not a folder")
        raise typer.Exit(2)
    if http and not _is_loopback(host):
        print_note(f"listening on {host}: any machine that reaches it can call the tools (no authentication)")
    settings.use_cache()
    from mmtok.cli.mcp_server import MAX_ARGUMENT_CHARS, build_server

    server = build_server(settings, allow_private=allow_private)
    if http:
        print_note(f"mmtok MCP server on http://{host}:{port}/mcp")
        server.run("streamable-http", host=host, port=port, max_request_body_size=MAX_ARGUMENT_CHARS + 1024 * 1024)
    else:
        server.run("stdio")


def _check_settings(settings: Config) -> None:
    """The settings' bars, read as shrink reads them: a bad one is a usage error at start, not a tool error later."""
    from mmtok.budgets.shrink import make_bars

    if settings.keep:
        make_bars(list(settings.keep))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
