"""Media references as bodies write them: data URLs, http(s) URLs, file URLs and paths, provider file ids."""

from __future__ import annotations

from typing import Any

from mmtok.request.types import MediaRef


def ref_from_url(url: Any, mime: str | None = None) -> MediaRef | None:
    """The reference a URL string makes: ``data:<mime>;base64,<data>``, ``http(s)://``, ``file://`` or a path.
    None for anything that is not a non-empty string."""
    if not isinstance(url, str) or not url.strip():
        return None
    head = url[:16].lower()
    if head.startswith("data:"):
        return _data_url(url, mime)
    if head.startswith(("http://", "https://")):
        return MediaRef("url", mime=mime, url=url)
    if head.startswith("file://"):
        return MediaRef("path", mime=mime, path=url[len("file://") :])
    return MediaRef("path", mime=mime, path=url)


def _data_url(url: str, mime: str | None) -> MediaRef:
    """``data:image/png;base64,....``; a data URL that is not base64 keeps its text as ``data`` with no mime, and
    the measurer says so."""
    comma = url.find(",", 0, 256)
    meta = url[5:comma] if comma > 0 else ""
    if comma < 0 or not meta.endswith(";base64"):
        return MediaRef("data", mime=None, data=None, url=url[:64])
    declared = meta[: -len(";base64")].split(";")[0].strip().lower() or None
    return MediaRef("data", mime=declared or mime, data=url[comma + 1 :])


def ref_from_base64(data: Any, mime: Any) -> MediaRef | None:
    """Inline base64 given apart from its mime type (Anthropic ``source``, Gemini ``inline_data``)."""
    if not isinstance(data, str):
        return None
    return MediaRef("data", mime=mime.lower() if isinstance(mime, str) else None, data=data)


def kind_of_mime(mime: str | None, default: str = "file") -> str:
    """The part kind a mime type names: image/* -> image, application/pdf -> document, ..."""
    if not mime:
        return default
    major = mime.split("/", 1)[0]
    if major in ("image", "audio", "video"):
        return major
    if mime in ("application/pdf", "application/x-pdf"):
        return "document"
    if major == "text" or mime in ("application/json", "application/xml"):
        return "text"
    return default


def text_of(value: Any) -> str:
    """Text from a value a body gives as text: a string, or a list/dict holding strings (tool arguments and
    results), serialised as the provider sees it."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
