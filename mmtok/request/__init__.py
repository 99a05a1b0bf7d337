"""API request bodies as inputs: read by structure, measured as files are, written back in their own shape.

    >>> request = parse_body(open("body.json", "rb").read())          # doctest: +SKIP
    >>> request.api, request.model, [p.kind for p in request.parts]     # doctest: +SKIP

Modules: ``types`` (Request, Part, MediaRef, OutputAsk, Invalid), ``detect`` (which API a body is for), ``openai`` /
``anthropic`` / ``gemini`` (one reader per provider), ``settings`` (what a body asks of the reply, and the values a
provider refuses), ``refs`` (data URLs, URLs, file ids), ``inline`` (base64 read by offset), ``measure`` (each part's
media, within the caps), ``write`` (a body with its media replaced).
"""

from mmtok.request.detect import MAX_BODY_BYTES, detect_api, looks_like_body, not_a_body, parse_body
from mmtok.request.measure import Measured, Policy, measuring
from mmtok.request.types import APIS, Invalid, InvalidBody, MediaRef, OutputAsk, Part, Request

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
