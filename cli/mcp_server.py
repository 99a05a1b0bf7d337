"""The MCP server behind ``mmtok mcp``: ``price``, ``shrink``, ``inspect`` and ``models`` as tools an agent calls.

Built on the official SDK's high-level server (``mcp.server.mcpserver.MCPServer``, mcp 2.x; FastMCP in 1.x). Each
tool (:mod:`mmtok.cli.mcp_tools`) is a thin call into the same library functions the CLI uses (:func:`mmtok.price`,
:func:`mmtok.budgets.pricing.price_request`, :func:`mmtok.shrink`, :func:`mmtok.load`,
:func:`mmtok.budgets.pricing.listing.model_rows`); what it refuses is a tool error of one line, and the server goes on.

Trust: the arguments come from a model that may have read anything, so they are data. Files are read only under
the roots the client grants (MCP roots) or the ``--root`` folders given at start (:class:`ReadPolicy`); URLs by
bounded reads that never reach a loopback, private or link-local address unless the server was started with
``--allow-private``; base64 data and request bodies up to :data:`MAX_ARGUMENT_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from mmtok.cli.mcp_tools import MAX_ARGUMENT_CHARS, ReadPolicy, Tools
from mmtok.config import Config

__all__ = ["MAX_ARGUMENT_CHARS", "ReadPolicy", "build_server"]

INSTRUCTIONS = (
    "mmtok prices what a model reads (images, audio, video, documents, API request bodies) by each provider's own "
    "rules, and shrinks an input to the cheapest version that still meets measured quality bars (SSIM, OCR "
    "agreement, WER). Call `price` before sending media, `shrink` to get a cheaper image back, `inspect` to see "
    "what a file is, `models` to see which models take what. Files are read only under the granted roots."
)


_VALIDATION = re.compile(r"^(Error executing tool \S+: )\d+ validation errors? for \w+\n(.*)$", re.S)


async def one_line_errors(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
    """Server middleware: a tool call whose arguments fail the tool's schema is answered with one line naming each
    field and what is wrong (pydantic's report spans lines, with a link per field)."""
    answer = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(answer, dict) and answer.get("isError"):
        for block in answer.get("content") or ():
            if block.get("type") == "text":
                block["text"] = condensed(block["text"])
    return answer


def condensed(text: str) -> str:
    """``Error executing tool price: 1 validation error for priceArguments\\npaths\\n  Input should be a valid
    list [type=...]`` as ``Error executing tool price: paths: Input should be a valid list``."""
    match = _VALIDATION.match(text)
    if match is None:
        return text
    problems, field = [], ""
    for line in match.group(2).splitlines():
        if not line.startswith(" "):
            field = line.strip()
        elif not line.startswith("    "):
            problems.append(f"{field}: {line.strip().split(' [type=')[0]}")
    return match.group(1) + "; ".join(problems) if problems else text


def build_server(config: Config, *, allow_private: bool = False) -> MCPServer:
    """The server, its tools reading under ``config.roots`` (and the client's roots) with the settings' model and
    bars as defaults."""
    import mmtok

    tools = Tools(config, ReadPolicy(config.roots, allow_private))
    server: MCPServer = MCPServer("mmtok", version=mmtok.__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    server.middleware.append(one_line_errors)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=True)
    for tool in (tools.price, tools.shrink, tools.inspect):
        server.add_tool(tool, annotations=reads)
    server.add_tool(tools.models, annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    return server
