"""API request bodies as inputs: read by structure, measured as files are, written back in their own shape.

    >>> request = parse_body(open("body.json", "rb").read())          # doctest: +SKIP
    >>> request.api, request.model, [p.kind for p in request.parts]     # doctest: +SKIP

Modules: ``types`` (Request, Part, MediaRef), ``detect`` (which API a body is for), ``openai`` / ``anthropic`` /
``gemini`` (one reader per provider), ``refs`` (data URLs, URLs, file ids), ``inline`` (base64 read by offset),
``measure`` (each part's media, within the caps), ``write`` (a body with its media replaced).
"""

from mmtok.request.detect import MAX_BODY_BYTES, detect_api, looks_like_body, not_a_body, parse_body
from mmtok.request.measure import Measured, Policy, measuring
from mmtok.request.types import APIS, MediaRef, Part, Request

__all__ = [
    "APIS",
    "MAX_BODY_BYTES",
    "Measured",
    "MediaRef",
    "Part",
    "Policy",
    "Request",
    "detect_api",
    "looks_like_body",
    "measuring",
    "not_a_body",
    "parse_body",
]
