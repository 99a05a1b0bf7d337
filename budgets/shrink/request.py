"""Shrink a request body: each of its media parts replaced by its cheapest rendition that meets the bars (or by the
pieces of a sliced page), written back as inline base64 in the body's own shape with the part's detail or media
resolution set, and the request priced before and after (the new body priced again from what was written).

    >>> result = shrink_request(open("body.json", "rb").read(), keep=["ocr>=0.98"])     # doctest: +SKIP
    >>> result.before.total_cost, result.after.total_cost, result.body                  # doctest: +SKIP

One parser serves this, ``mmtok price`` and the proxy (:mod:`mmtok.request`); each part is shrunk by :func:`shrink`
as a file would be.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.budgets.pricing import Model, Options, Quote, price_request, quote_request, resolve
from mmtok.budgets.pricing.requests import API_PROVIDERS, model_for, provider_of
from mmtok.budgets.shrink.core import shrink
from mmtok.budgets.shrink.result import ShrinkResult
from mmtok.errors import MmtokError
from mmtok.media.remote import RemoteFile
from mmtok.request import Measured, Policy, Request, measuring, parse_body
from mmtok.request.inline import Base64Bytes
from mmtok.request.write import Media, write_body

SHRUNK_KINDS = ("image", "audio", "video")
SUFFIX_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
               ".gif": "image/gif", ".wav": "audio/wav", ".mp3": "audio/mpeg", ".flac": "audio/flac",
               ".ogg": "audio/ogg", ".aiff": "audio/aiff", ".mp4": "video/mp4", ".mov": "video/quicktime",
               ".webm": "video/webm"}  # fmt: skip


@dataclass
class RequestShrink:
    """A shrunk body, what it cost before and after, and what was done to each media part."""

    body: dict[str, Any]  # the new body, in the shape of the old
    before: Quote
    after: Quote
    parts: list[tuple[str, ShrinkResult]] = field(default_factory=list)  # (where, result) per media part shrunk
    left: list[str] = field(default_factory=list)  # parts left as they were, with why
    warnings: list[str] = field(default_factory=list)  # what a user must know before sending the new body
    replaced: list[str] = field(default_factory=list)  # the parts the new body carries a rendition for

    @property
    def saved(self) -> float:
        """The share of the input cost saved (0.25: a quarter)."""
        before = self.before.input_cost
        return float((before - self.after.input_cost) / before) if before else 0.0


def shrink_request(
    body: Request | bytes | str | dict[str, Any],
    model: str | None = None,
    *,
    keep: Mapping[str, float] | Sequence[str] | None = None,
    lossless: bool = False,
    slice: bool = False,
    prices: Sequence[str | os.PathLike[str]] = (),
    policy: Policy | None = None,
    out: str | os.PathLike[str] | None = None,
    at: str | None = None,
    source: str = "<body>",
) -> RequestShrink:
    """Shrink every image, recording and video in an API request body for ``model`` (default: the body's own).
    ``keep``, ``lossless`` and ``slice`` as :func:`mmtok.shrink`; ``policy`` says which URLs and paths the body's
    media may be read from; ``out``: a folder to keep the renditions in as files too (otherwise they live only in
    the new body, and the results' paths are gone). The new body keeps everything else the old one had."""
    request = body if isinstance(body, Request) else parse_body(body, source=source)
    name = model_for(request, model)
    target = resolve(name, prices)
    options = Options.of(at=at)
    warnings = _other_provider(request, target)
    policy = policy or Policy()
    with measuring(request.parts, policy) as measured, tempfile.TemporaryDirectory(prefix="mmtok-shrink-") as folder:
        before = quote_request(request, measured, target, options)
        replaced: dict[int, list[Media]] = {}
        result = RequestShrink({}, before, before, warnings=warnings)
        for index, part in enumerate(measured):
            written = Path(out) if out is not None else Path(folder) / "out"
            done = _shrink_part(part, name, Path(folder), written, policy, keep, lossless, slice, prices)
            if isinstance(done, str):
                if done:
                    result.left.append(f"{part.name}: {done}")
                continue
            result.parts.append((part.name, done))
            if _smaller(done):
                replaced[index] = _media_of(done)
                result.replaced.append(part.name)
        result.body = write_body(request, replaced) if replaced else request.body
    result.after = price_request(result.body, name, prices=prices, at=at, policy=policy, source=request.source)
    return result


def _smaller(result: ShrinkResult) -> bool:
    """Whether a part's rendition is worth writing: fewer tokens, or the same tokens in fewer bytes."""
    if result.status == "kept":
        return False
    return result.tokens_after < result.tokens_before or result.bytes_after < result.bytes_before


def _other_provider(request: Request, model: Model) -> list[str]:
    """A body shrunk for another provider's model keeps its own model name and endpoint: said."""
    own = API_PROVIDERS[request.api.split("-")[0]]  # (the caller names the body)
    theirs = provider_of(model)
    if not theirs or theirs == own:
        return []
    return [
        f"{_an(own)} body (model {request.model or 'named in its URL'}) shrunk for {model.asked}, "
        f"{_an(theirs)} model: its media now suit {model.asked}, but the body still names its own model and is sent to "
        f"{own}; price it there with mmtok price -m {request.model or 'MODEL'}"
    ]


def _an(provider: str) -> str:
    return f"{'an' if provider[:1] in 'aeiou' else 'a'} {provider}"


def _shrink_part(
    part: Measured,
    model: str,
    folder: Path,
    out: Path,
    policy: Policy,
    keep: Any,
    lossless: bool,
    slice_: bool,
    prices: Sequence[Any],
) -> ShrinkResult | str:
    """The part shrunk, or why it was left as it was ("" for text)."""
    if part.part.kind == "text" or part.media is None:
        return part.error
    if getattr(part.media, "kind", "") not in SHRUNK_KINDS:
        return f"a {part.media.kind} part is sent as it is"
    try:
        path = _copy(part, folder, policy)
        return shrink(path, model, keep=keep, lossless=lossless, slice=slice_, detail=part.part.detail,
                      out=out, prices=prices)  # fmt: skip
    except MmtokError as e:
        return str(e)


def _copy(part: Measured, folder: Path, policy: Policy) -> Path:
    """The part's bytes in a file of its own (shrink reads files), within the size caps."""
    ref = part.part.ref
    assert ref is not None
    if ref.scheme == "path":
        return Path(part.media.path)
    if ref.scheme == "data":
        data = Base64Bytes(ref.data or "", part.name).read_all(policy.max_inline_bytes)
    else:
        with RemoteFile(ref.url or "", policy.urls) as remote:
            data = remote.read_all()
    suffix = f".{part.media.format}" if part.media.format in ("png", "jpeg", "webp", "gif", "wav", "mp3") else ""
    path = folder / f"part-{len(os.listdir(folder))}{suffix}"
    path.write_bytes(data)
    return path


def _media_of(result: ShrinkResult) -> list[Media]:
    """The written rendition (or each piece of a sliced page) as new bytes for the body."""
    files = result.pieces or [result.path]
    return [Media(p.read_bytes(), SUFFIX_MIME.get(p.suffix.lower(), "application/octet-stream"), result.detail)
            for p in files]  # fmt: skip
