"""Requests a provider refuses before it bills anything: per-image pixel and byte limits, images per request, the
request's size. ``mmtok price`` warns with the limit, its source and the remedy; the proxy records it; ``mmtok
shrink`` never keeps an original its provider refuses.

Each provider's page, read 2026-12-05 (the stored copies the search tool holds):

- **Anthropic** (https://platform.claude.com/docs/en/build-with-claude/vision): "The maximal dimensions per image are
  8000x8000 px. If you submit more than 20 images in one API request, this limit is reduced to 2000x2000 px."; "the API
  supports up to 600 images per request, request size limits (32 MB for standard endpoints ...) can be reached
  first"; 5 MB per image, counted on the base64 text the API receives (its answer: "image exceeds 5 MB maximum:
  ... bytes > 5242880 bytes").
- **OpenAI** (https://developers.openai.com/api/docs/guides/images-vision, "Image input requirements"): "Up to 50 MB
  total payload size per request", "Up to 500 individual image inputs per request".
- **Gemini** (https://blog.google/innovation-and-ai/technology/developers-tools/gemini-api-new-file-limits: inline
  data up to 100 MB a request, larger files by the Files API or a URL; Google Cloud's image-understanding page: 3,000
  images per prompt on Gemini 2.5 and later).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mmtok.media.types import Image

MB = 1_000_000
READ = "2026-12-05"


@dataclass(frozen=True)
class ProviderLimits:
    source: str
    max_edge_px: int | None = None  # either side of one image
    many_images: int | None = None  # above this many images in a request ...
    many_images_edge_px: int | None = None  # ... each side must be within this
    image_base64_bytes: int | None = None  # one image, as the base64 text sent
    max_images: int | None = None
    images_bytes: int | None = None  # all the images of a request, as sent
    request_bytes: int | None = None  # the whole request body


LIMITS = {
    "anthropic": ProviderLimits(
        "https://platform.claude.com/docs/en/build-with-claude/vision",
        max_edge_px=8000,
        many_images=20,
        many_images_edge_px=2000,
        image_base64_bytes=5 * 1024 * 1024,
        max_images=600,
        request_bytes=32 * MB,
    ),
    "openai": ProviderLimits(
        "https://developers.openai.com/api/docs/guides/images-vision", max_images=500, images_bytes=50 * MB
    ),
    "google": ProviderLimits(
        "https://blog.google/innovation-and-ai/technology/developers-tools/gemini-api-new-file-limits",
        max_images=3000,
        request_bytes=100 * MB,
    ),
}


@dataclass(frozen=True)
class Picture:
    """An image of a request as the limits see it: its name, pixels and size in bytes (None: not known)."""

    name: str
    width: int
    height: int
    size_bytes: int | None


def base64_bytes(size: int) -> int:
    return 4 * math.ceil(size / 3)


def broken_limits(provider: str, model: str, attachments: Sequence[Any], request_bytes: int | None = None) -> list[str]:
    """One line per limit of ``provider`` the request of ``attachments`` (a quote's: ``name``, ``item``) breaks: what,
    the limit and its source, and the remedy. ``request_bytes``: the body's length as sent (None: the media's base64,
    as a file request is sent)."""
    rules = LIMITS.get(provider)
    if rules is None or _clearly_within(rules, attachments, request_bytes):
        return []
    pictures = pictures_of(attachments)
    if request_bytes is None and rules.request_bytes is not None:
        request_bytes = sent_bytes(attachments)
    found = [*_per_image(rules, pictures), *_per_request(rules, pictures, request_bytes)]
    remedy = f"mmtok shrink -m {model}" if any(kind == "image" for kind, _ in found) else "send fewer or smaller parts"
    return [f"{what} ({rules.source}, read {READ}): the provider refuses it; {remedy}" for _, what in found]


def _clearly_within(rules: ProviderLimits, attachments: Sequence[Any], request_bytes: int | None) -> bool:
    """One pass over the attachments that is true when no limit can be near (most requests): the lines are only
    worded where one may be broken. Every test here is looser than the limit it stands for."""
    images = largest_side = largest = total = 0
    for attachment in attachments:
        item = attachment[1]
        size = getattr(item, "size_bytes", None) or 0
        total += size
        if type(item) is Image:
            images += 1
            largest_side = max(largest_side, item.width, item.height)
            largest = max(largest, size)
    sent = total * 4 // 3 + 4 * len(attachments)  # more than the base64 of every part
    edge = min(e for e in (rules.max_edge_px, rules.many_images_edge_px, 1 << 30) if e is not None)
    return (
        largest_side <= edge
        and (rules.max_images is None or images <= rules.max_images)
        and (rules.image_base64_bytes is None or largest * 4 // 3 + 4 <= rules.image_base64_bytes)
        and (rules.images_bytes is None or sent <= rules.images_bytes)
        and (rules.request_bytes is None or max(request_bytes or 0, sent) <= rules.request_bytes)
    )


def image_refused(provider: str, width: int, height: int, size_bytes: int | None) -> str:
    """Why ``provider`` refuses this one image on its own ("" where it takes it): for ``mmtok shrink``."""
    rules = LIMITS.get(provider)
    if rules is None:
        return ""
    found = list(_per_image(rules, [Picture("the image", width, height, size_bytes)]))
    return f"{found[0][1]} ({rules.source}, read {READ})" if found else ""


def _per_image(rules: ProviderLimits, pictures: Sequence[Picture]) -> Iterable[tuple[str, str]]:
    edge = rules.max_edge_px
    if rules.many_images is not None and len(pictures) > rules.many_images:
        edge = rules.many_images_edge_px
    for p in pictures:
        if edge is not None and max(p.width, p.height) > edge:
            many = f" in a request of more than {rules.many_images} images" if edge != rules.max_edge_px else ""
            yield "image", f"{p.name}: {p.width}x{p.height} px is over the {edge:,} px limit per side{many}"
        if rules.image_base64_bytes is not None and p.size_bytes is not None:
            sent = base64_bytes(p.size_bytes)
            if sent > rules.image_base64_bytes:
                limit = rules.image_base64_bytes
                yield "image", f"{p.name}: {sent:,} bytes as base64 is over the {limit:,}-byte limit per image"


def _per_request(
    rules: ProviderLimits, pictures: Sequence[Picture], request_bytes: int | None
) -> Iterable[tuple[str, str]]:
    if rules.max_images is not None and len(pictures) > rules.max_images:
        yield "count", f"{len(pictures):,} images is over the limit of {rules.max_images:,} per request"
    sizes = [p.size_bytes for p in pictures if p.size_bytes is not None]
    if rules.images_bytes is not None and sum(base64_bytes(s) for s in sizes) > rules.images_bytes:
        total, limit = sum(base64_bytes(s) for s in sizes), rules.images_bytes // MB
        yield "image", f"the images are {total:,} bytes as sent, over the {limit} MB limit per request"
    if rules.request_bytes is not None and request_bytes is not None and request_bytes > rules.request_bytes:
        yield "image", f"the request is {request_bytes:,} bytes, over the {rules.request_bytes // MB} MB limit"


def pictures_of(attachments: Sequence[Any]) -> list[Picture]:
    """The images among a quote's attachments (``name``, ``item``), with their pixels and bytes."""
    return [Picture(a[0], a[1].width, a[1].height, a[1].size_bytes) for a in attachments if type(a[1]) is Image]


def sent_bytes(attachments: Sequence[Any]) -> int:
    """A request's size as the media's base64 (a file request is sent so): a lower bound of the body's length."""
    return sum(base64_bytes(getattr(a[1], "size_bytes", 0) or 0) for a in attachments)
