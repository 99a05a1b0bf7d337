"""The tools of ``mmtok mcp`` (see :mod:`mmtok.cli.mcp_server`): what each takes, the read policy it is held to,
and the one-line errors it answers with. Each is a thin call into the library, as the CLI's commands are."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import logging
import os
import tempfile
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, ListRoots, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import AudioContent, CallToolResult, ImageContent, ListRootsResult, TextContent
from pydantic import Field

import mmtok
from mmtok.config import Config
from mmtok.errors import MediaError, MmtokError

log = logging.getLogger("mmtok.mcp")

# One call's base64 data or request body, as characters: 32 MiB, at least a whole Anthropic Messages request (the API
# overview's "Request size limits": 32 MB for Messages and Token Counting; https://docs.anthropic.com/en/api/overview,
# read in its translations on 2026-12-02). A larger argument is refused before it is decoded.
MAX_ARGUMENT_CHARS = 32 * 1024 * 1024
MAX_ITEMS = 256  # paths + URLs in one call
DEFAULT_MODEL = "gpt-4o"  # the CLI's, when neither the call nor the settings name one
DETAILS = Literal["low", "high", "original", "auto", "medium", "ultra_high"]
# The MIME type of a content block, by the format mmtok.load reads from the output's own bytes (never its name: a
# kept input given as data has none)
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
               "bmp": "image/bmp", "tiff": "image/tiff", "heif": "image/heif", "avif": "image/avif",
               "wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg", "ogg": "audio/ogg",
               "aiff": "audio/aiff", "m4a": "audio/mp4", "aac": "audio/aac", "mp4": "audio/mp4",
               "webm": "audio/webm", "matroska": "audio/x-matroska"}  # fmt: skip


@dataclass(frozen=True)
class ReadPolicy:
    """What the server may read: files under ``roots`` (and under the roots the client grants), URLs by
    ``allow_private``."""

    roots: tuple[Path, ...] = ()
    allow_private: bool = False

    def allowed(self, granted: ListRootsResult | None) -> tuple[Path, ...]:
        """The fixed roots and the client's ``file://`` roots, each resolved (symbolic links followed)."""
        folders = list(self.roots)
        for root in granted.roots if granted is not None else ():
            uri = urllib.parse.urlsplit(str(root.uri))
            if uri.scheme == "file" and uri.netloc in ("", "localhost"):
                folders.append(Path(urllib.parse.unquote(uri.path)))
        return tuple(dict.fromkeys(Path(os.path.realpath(f)) for f in folders))

    def path(self, given: str, granted: ListRootsResult | None) -> Path:
        """``given`` as a file under an allowed root (a relative path is taken under the first), or a
        :class:`MediaError` saying why not. The check is on the real path, so a link out of a root is refused."""
        roots = self.allowed(granted)
        named = _shown_path(given)
        if not roots:
            raise MediaError(named, "no folder is open to this server: start it with --root DIR, or grant roots")
        text = urllib.parse.unquote(given[7:]) if given.startswith("file://") else given
        if "\x00" in text:
            raise MediaError(named, "has a NUL byte: no file can be named so")
        try:
            candidate = Path(text).expanduser()
            real = Path(os.path.realpath(candidate if candidate.is_absolute() else roots[0] / candidate))
            if not any(real == root or real.is_relative_to(root) for root in roots):
                raise MediaError(named, f"outside the folders open to this server ({', '.join(map(str, roots))})")
            if not real.is_file():
                raise MediaError(named, "no such file" if not real.exists() else "not a file")
        except OSError as e:  # a name over the system's limits (ENAMETOOLONG), a loop of links
            raise MediaError(named, f"cannot be read: {e.strerror or e}") from None
        return real

    def urls(self) -> Any:
        """The request-measuring policy for URLs (and none for local paths named inside a body)."""
        from mmtok.media.remote import UrlPolicy
        from mmtok.request import Policy

        return Policy(urls=UrlPolicy(allow_private=self.allow_private), paths_under=None)


def _shown_path(given: str, most: int = 120) -> str:
    """A path as an error names it: whole when short, else its start and its length (a 5,000-character name)."""
    shown = given.replace("\x00", "\\0")
    return shown if len(shown) <= most else f"{shown[:most]}... ({len(given):,} characters)"


async def granted_roots(ctx: Context) -> ListRoots | None:
    """Ask the client for its roots (MCP ``roots/list``) when it declares it has them; None when it does not."""
    capabilities = ctx.client_capabilities
    return ListRoots() if capabilities is not None and capabilities.roots is not None else None


Granted = Annotated[ListRootsResult | None, Resolve(granted_roots)]


def tool_errors(tool: Callable[..., CallToolResult]) -> Callable[..., CallToolResult]:
    """A tool whose refusals reach the client as one line: mmtok's own errors as they are, anything else as an
    unexpected error (its traceback in the server's log), never a crash of the server."""

    @functools.wraps(tool)
    def run(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return tool(*args, **kwargs)
        except ToolError:
            raise
        except MmtokError as e:
            raise ToolError(str(e)) from None
        except Exception as e:
            log.exception("mmtok %s failed", tool.__name__)
            raise ToolError(f"unexpected {type(e).__name__}: {e} (a bug in mmtok: please report it)") from None

    return run


def result(payload: dict[str, Any], *blocks: ImageContent | AudioContent, text: str | None = None) -> CallToolResult:
    """``payload`` as structured content and as text after any media: ``text`` where the JSON would be too long for
    a model to read (the models table), else the JSON itself, for clients that read only text."""
    said = TextContent(type="text", text=text if text is not None else json.dumps(payload, indent=1, default=str))
    return CallToolResult(content=[*blocks, said], structured_content=payload)


def model_line(row: dict[str, Any]) -> str:
    """One model of ``mmtok models`` as a line a model reads: what it takes, its image rule, its prices."""
    rule = row["rules"].get("image")
    prices = row["prices"] or {}
    money = f"${prices['input']} in / ${prices.get('output', '?')} out per 1M" if "input" in prices else "no price"
    parts = [
        f"{row['model']} ({row['provider'] or row['family'] or '?'})",
        "takes " + ",".join(row["takes"]),
        f"image: {rule['formula']} ({rule['label']})" if rule else "",
        money,
        f"context {row['context_window']:,}" if row["context_window"] else "",
        f"retired {row['retired']}" if row["retired"] else "",
    ]
    return "; ".join(p for p in parts if p)


def batch(payload: dict[str, Any], done: list[Any], errors: list[dict[str, str]]) -> CallToolResult:
    """A batch's result; when every item failed, a tool error of one line per item instead."""
    if errors and not done:
        raise ToolError("; ".join(e["error"] for e in errors))
    return result({**payload, "errors": errors})


def check_size(name: str, chars: int, instead: str) -> None:
    """The stated cap on one argument, checked before anything is decoded."""
    if chars > MAX_ARGUMENT_CHARS:
        raise ToolError(
            f"{name}: {chars:,} characters; this server takes at most {MAX_ARGUMENT_CHARS:,} in one argument "
            f"({instead})"
        )


def check_items(paths: Sequence[str], urls: Sequence[str]) -> None:
    if not paths and not urls:
        raise ToolError("give paths or urls")
    if len(paths) + len(urls) > MAX_ITEMS:
        raise ToolError(f"{len(paths) + len(urls):,} items: at most {MAX_ITEMS} in one call")


class Tools:
    """``price``, ``shrink``, ``inspect`` and ``models``, reading under ``policy`` with ``config``'s model and bars
    as defaults. Registered on the server as bound methods: ``granted`` is filled by the server (the client's
    roots), every other parameter is the tool's schema."""

    def __init__(self, config: Config, policy: ReadPolicy) -> None:
        self.config = config
        self.policy = policy

    @tool_errors
    def price(
        self,
        granted: Granted,
        paths: Annotated[list[str], Field(description="Files, each one request; under the granted roots.")] = [],  # noqa: B006
        urls: Annotated[list[str], Field(description="http(s) URLs of media, each one request.")] = [],  # noqa: B006
        body: Annotated[
            dict[str, Any] | None,
            Field(description="An API request body (OpenAI Chat/Responses, Anthropic Messages, Gemini), one request."),
        ] = None,
        models: Annotated[list[str], Field(description="Models to price on (default: the configured one).")] = [],  # noqa: B006
        text: Annotated[str | None, Field(description="The prompt sent with each file or URL.")] = None,
        detail: Annotated[DETAILS | None, Field(description="OpenAI detail or Gemini media_resolution.")] = None,
        output_tokens: Annotated[int | None, Field(ge=0, description="The reply's tokens.")] = None,
    ) -> CallToolResult:
        """What each request costs on each model: tokens per part and modality, the rate and why, the working,
        and the price source with its date. A request body is priced with its own settings and, without
        `models`, on the model it names."""
        quotes: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        if body is not None:
            check_size("body", len(json.dumps(body)), "give its media as files or URLs")
            _price_body(body, list(models), output_tokens, self.policy, quotes, errors)  # no models: the body's own
        if paths or urls or body is None:
            check_items(paths, urls)
            names = list(models) or [self.config.model_or(DEFAULT_MODEL)]
            options = {"text": text, "detail": detail, "output_tokens": output_tokens or 0}
            for path in paths:
                _price_item(path, names, options, lambda p=path: _read(self.policy.path(p, granted)), quotes, errors)
            for url in urls:
                _price_url(url, names, options, self.policy, quotes, errors)
        return batch({"quotes": quotes}, quotes, errors)

    @tool_errors
    def shrink(
        self,
        granted: Granted,
        path: Annotated[str | None, Field(description="An image or recording under the granted roots.")] = None,
        data: Annotated[
            str | None,
            Field(description=f"The input as base64 (at most {MAX_ARGUMENT_CHARS:,} characters), instead of path."),
        ] = None,
        model: Annotated[
            str | None, Field(description="The model to shrink for (default: the configured one).")
        ] = None,
        keep: Annotated[
            list[str], Field(description="Quality bars, e.g. ocr>=0.98, ssim>=0.95 (default: the configured ones).")
        ] = [],  # noqa: B006
        lossless: Annotated[bool, Field(description="Only changes the model cannot see.")] = False,
        detail: Annotated[DETAILS | None, Field(description="The detail the original would be sent with.")] = None,
    ) -> CallToolResult:
        """The cheapest version of an image (or recording) for a model that meets every quality bar, returned as
        an image (audio) content block, with tokens and cost before and after, what was done, and each measure."""
        if (path is None) == (data is None):
            raise ToolError("give one of path or data")
        source = self.policy.path(path, granted) if path is not None else _decoded(data or "")
        name = model or self.config.model_or(DEFAULT_MODEL)
        bars = list(keep) or list(self.config.keep) or None
        folder = _output_folder(source, name, bars, lossless, detail)
        done = mmtok.shrink(source, name, keep=bars, lossless=lossless, out=folder, detail=detail)
        payload = {k: v for k, v in done.to_dict().items() if k != "tried"}
        payload["input"] = path if path is not None else "<data>"
        return result(payload, *_media_block(done.path, done.kind))

    @tool_errors
    def inspect(
        self,
        granted: Granted,
        paths: Annotated[list[str], Field(description="Files under the granted roots.")] = [],  # noqa: B006
        urls: Annotated[list[str], Field(description="http(s) URLs of media.")] = [],  # noqa: B006
    ) -> CallToolResult:
        """What each file is, from its headers: kind, format, codec, size, duration, rates, frames, channels."""
        check_items(paths, urls)
        found: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for path in paths:
            try:
                found.append({**mmtok.load(self.policy.path(path, granted)).info(), "path": path})
            except MmtokError as e:
                errors.append({"item": path, "error": str(e)})
        for url in urls:
            try:
                with _measured(url, self.policy) as media:
                    found.append({**media.info(), "path": url})
            except MmtokError as e:
                errors.append({"item": url, "error": str(e)})
        return batch({"items": found}, found, errors)

    @tool_errors
    def models(
        self,
        provider: Annotated[
            str | None, Field(description="Only this provider (openai, anthropic, google, ...).")
        ] = None,
        modality: Annotated[
            Literal["text", "image", "audio", "video"] | None, Field(description="Only models that take this.")
        ] = None,
        contains: Annotated[str | None, Field(description="Only models whose name contains this.")] = None,
    ) -> CallToolResult:
        """Priced models: what each takes, its media rules and their labels, prices per 1M tokens, context window
        and retirement date."""
        from mmtok.budgets.pricing.listing import model_rows

        rows = [r for r in model_rows(provider, modality) if not contains or contains.lower() in r["model"].lower()]
        if not rows:
            raise ToolError("no models match (see the tool without filters)")
        return result({"models": rows}, text="\n".join(model_line(row) for row in rows))


def _price_item(
    item: str, models: list[str], options: dict[str, Any], read: Callable[[], Any], quotes: list, errors: list
) -> None:
    """Media read once (``read``: a path's headers, a URL's first bytes), then priced on each model; its errors
    listed, not raised, each naming the input and the model."""
    try:
        media = read()
    except MmtokError as e:
        errors.append({"item": item, "error": str(e)})
        return
    for model in models:
        try:
            quotes.append({**mmtok.price(media, model, **options).to_dict(), "item": item})
        except MmtokError as e:
            said = str(e) if model in str(e) else f"{model}: {e}"
            errors.append({"item": item, "model": model, "error": said if item in said else f"{item}: {said}"})


def _read(path: Path) -> Any:
    """A file as the CLI reads it for pricing: media from its headers, a token file as its path."""
    return path if path.suffix == ".safetensors" else mmtok.load(path)


def _price_url(
    url: str, models: list[str], options: dict[str, Any], policy: ReadPolicy, quotes: list, errors: list
) -> None:
    """A URL measured once by bounded reads (as a request body's URL is), then priced on each model."""
    try:
        with _measured(url, policy) as media:
            _price_item(url, models, options, lambda: media, quotes, errors)
    except MmtokError as e:
        errors.append({"item": url, "error": str(e)})


def _price_body(
    body: dict[str, Any], models: list[str], output_tokens: int | None, policy: ReadPolicy, quotes: list, errors: list
) -> None:
    """An API request body read once (the body that cannot be read is the call's error), priced on each model or,
    with none given, on the model it names."""
    from mmtok.budgets.pricing import price_request
    from mmtok.request import parse_body

    request = parse_body(body, source="body")
    for model in models or [None]:
        try:
            quote = price_request(request, model, output_tokens=output_tokens, policy=policy.urls(), source="body")
            quotes.append(quote.to_dict())
        except MmtokError as e:
            errors.append({"item": "body", "model": model or "", "error": str(e)})


class _measured:
    """A URL's media, measured as a request body's URL part is (mmtok.request.measuring); copies made to load a
    recording live until the block ends."""

    def __init__(self, url: str, policy: ReadPolicy) -> None:
        from mmtok.request import MediaRef, Part, measuring

        if not url.lower().startswith(("http://", "https://")):
            raise MediaError(url, "not an http(s) URL")
        part = Part(kind="file", where=url, ref=MediaRef("url", url=url))
        self.context = measuring((part,), policy.urls())

    def __enter__(self) -> Any:
        (measured,) = self.context.__enter__()
        if measured.error:
            self.context.__exit__(None, None, None)
            raise MediaError(measured.part.where, measured.error.removeprefix(f"{measured.part.where}: "))
        return measured.media

    def __exit__(self, *exc: object) -> None:
        self.context.__exit__(*exc)


def _decoded(data: str) -> Path:
    """Base64 data written to a private file in the cache folder, named by its hash (shrink reads files)."""
    from mmtok.cache import cache_dir

    check_size("data", len(data), "give a path under a granted root instead")
    try:
        raw = base64.b64decode(data.split(",", 1)[1] if data.startswith("data:") else data, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("data: not base64 (give the file's bytes in standard base64, or a data: URL)") from None
    if not raw:
        raise ToolError("data: empty")
    folder = cache_dir("mcp", "inputs")
    path = folder / hashlib.sha256(raw).hexdigest()[:32]
    if not path.exists():
        fd, partial = tempfile.mkstemp(dir=folder, prefix=".data-")
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(partial, path)
    return path


def _output_folder(source: Path, model: str, bars: list[str] | None, lossless: bool, detail: str | None) -> Path:
    """One folder per input version and request, so calls asking different things never write the same file."""
    from mmtok.cache import cache_dir

    stat = source.stat()
    key = json.dumps([str(source), stat.st_size, stat.st_mtime_ns, model, bars, lossless, detail])
    return cache_dir("mcp", "shrink", hashlib.sha256(key.encode()).hexdigest()[:16])


def _media_block(path: Path, kind: str) -> list[ImageContent | AudioContent]:
    """The written output as the content block a client shows or hears (video has none: its path is in the text)."""
    size = path.stat().st_size
    if kind == "video" or size * 4 / 3 > MAX_ARGUMENT_CHARS:
        return []
    mime = MEDIA_TYPES.get(mmtok.load(path).format)
    if mime is None:  # a format no MIME type is known for: its path is in the text, as a video's is
        return []
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    if kind == "audio":
        return [AudioContent(type="audio", data=data, mime_type=mime)]
    return [ImageContent(type="image", data=data, mime_type=mime)]
