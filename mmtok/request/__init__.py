"""API request bodies as inputs: read by structure, measured as files are, written back in their own shape.

    >>> request = parse_body(open("body.json", "rb").read())          # doctest: +SKIP
    >>> request.api, request.model, [p.kind for p in request.parts]     # doctest: +SKIP

Modules: ``types`` (Request, Part, MediaRef, OutputAsk, Invalid), ``sniff`` (whether bytes could be a body),
``detect`` (which API a body is for), ``openai`` / ``anthropic`` / ``gemini`` (one reader per provider), ``settings``
(what a body asks of the reply, and the values a provider refuses), ``refs`` (data URLs, URLs, file ids), ``inline``
(base64 read by offset), ``measure`` (each part's media, within the caps), ``write`` (a body with its media
replaced).
"""

from mmtok.lazy import lazy_exports

# name -> its module, imported on first use: a command that prices a photo never loads the body readers
_LAZY = {
    "MAX_BODY_BYTES": "mmtok.request.sniff",
    "detect_api": "mmtok.request.detect",
    "looks_like_body": "mmtok.request.sniff",
    "not_a_body": "mmtok.request.detect",
    "parse_body": "mmtok.request.detect",
    "Measured": "mmtok.request.measure",
    "Policy": "mmtok.request.measure",
    "measuring": "mmtok.request.measure",
    "APIS": "mmtok.request.types",
    "Invalid": "mmtok.request.types",
    "InvalidBody": "mmtok.request.types",
    "OutputAsk": "mmtok.request.types",
    "MediaRef": "mmtok.request.types",
    "Part": "mmtok.request.types",
    "Request": "mmtok.request.types",
}

__all__ = [
    "APIS",
    "MAX_BODY_BYTES",
    "Invalid",
    "InvalidBody",
    "Measured",
    "MediaRef",
    "OutputAsk",
    "Part",
    "Policy",
    "Request",
    "detect_api",
    "looks_like_body",
    "measuring",
    "not_a_body",
    "parse_body",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
