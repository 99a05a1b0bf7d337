"""The three provider APIs the proxy speaks: which paths are which API, where they go upstream, and each
provider's own error body, so that an SDK pointed at the proxy reads mmtok's refusals as it reads the provider's.

Error shapes, as the official SDKs parse them (openai 3.57 ``_exceptions``, anthropic 2.15 ``_exceptions``,
google-genai 3.6 ``errors.APIError``; read 2026-12-02):

- OpenAI: ``{"error": {"message", "type", "param", "code"}}``.
- Anthropic: ``{"type": "error", "error": {"type", "message"}}`` with the types listed at
  https://docs.anthropic.com/en/api/errors (invalid_request_error 400, not_found_error 404, request_too_large 413,
  rate_limit_error 429, api_error 500, overloaded_error 529).
- Gemini: ``{"error": {"code", "message", "status"}}`` with google.rpc status names
  (https://ai.google.dev/gemini-api/docs/troubleshooting: INVALID_ARGUMENT 400, NOT_FOUND 404,
  RESOURCE_EXHAUSTED 429, INTERNAL 500, UNAVAILABLE 503, DEADLINE_EXCEEDED 504).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

DEFAULT_UPSTREAMS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}
PREFIXES = {"openai": "/v1", "anthropic": "/anthropic", "gemini": "/gemini"}  # proxy path -> upstream base + rest
OPENAI_APIS = {
    "/v1/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/v1/responses/input_tokens": "openai-input-tokens",
}
ANTHROPIC_APIS = {
    "/anthropic/v1/messages": "anthropic-messages",
    "/anthropic/v1/messages/count_tokens": "anthropic-count-tokens",
}
GEMINI_METHODS = {
    "generateContent": "gemini-generate",
    "streamGenerateContent": "gemini-generate",
    "countTokens": "gemini-count-tokens",
}
GEMINI_PATH = re.compile(r"^/gemini/(v1beta|v1|v1alpha)/models/([A-Za-z0-9._-]{1,200}):([A-Za-z]+)$")
COUNT_APIS = frozenset({"openai-input-tokens", "anthropic-count-tokens", "gemini-count-tokens"})  # free to call

# Hop-by-hop headers (RFC 9110 7.6.1) and those the proxy sets itself are not forwarded; everything else, the
# caller's credentials included, goes upstream untouched.
DROPPED_REQUEST_HEADERS = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "accept-encoding",  # httpx asks for what it can decode; the client gets the decoded bytes
    }
)
DROPPED_RESPONSE_HEADERS = DROPPED_REQUEST_HEADERS | {"content-encoding", "content-length"}


@dataclass(frozen=True)
class Route:
    """Where a request to the proxy goes: its provider and API, the model the path names (Gemini), and the
    path upstream (relative to the provider's base URL)."""

    provider: str
    api: str
    upstream_path: str
    model: str | None = None
    streams: bool = False  # the path itself asks for a stream (Gemini streamGenerateContent)


def provider_of(path: str) -> str | None:
    """The provider whose prefix ``path`` is under, or None."""
    if path == "/v1" or path.startswith("/v1/"):
        return "openai"
    for provider in ("anthropic", "gemini"):
        prefix = PREFIXES[provider]
        if path == prefix or path.startswith(prefix + "/"):
            return provider
    return None


def route(path: str) -> Route | None:
    """The API a path is, or None for a path the proxy does not serve."""
    api = OPENAI_APIS.get(path)
    if api:
        return Route("openai", api, path[len("/v1") :])
    api = ANTHROPIC_APIS.get(path)
    if api:
        return Route("anthropic", api, path[len("/anthropic") :])
    found = GEMINI_PATH.match(path)
    if found and found.group(3) in GEMINI_METHODS:
        method = found.group(3)
        return Route(
            "gemini", GEMINI_METHODS[method], path[len("/gemini") :], found.group(2), method == "streamGenerateContent"
        )
    return None


OPENAI_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 405: "invalid_request_error"}
OPENAI_TYPES |= {413: "invalid_request_error", 429: "insufficient_quota", 502: "server_error", 504: "server_error"}
ANTHROPIC_TYPES = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error"}
ANTHROPIC_TYPES |= {413: "request_too_large", 429: "rate_limit_error", 502: "api_error", 504: "api_error"}
GEMINI_STATUSES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT"}
GEMINI_STATUSES |= {429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(provider: str | None, status: int, message: str, code: str | None = None) -> dict[str, Any]:
    """``message`` in the error shape of ``provider`` (OpenAI's where the path names none)."""
    if provider == "anthropic":
        return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    if provider == "gemini":
        return {"error": {"code": status, "message": message, "status": GEMINI_STATUSES.get(status, "INTERNAL")}}
    kind = OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def error_response(
    provider: str | None, status: int, message: str, code: str | None = None, retry: bool = True
) -> JSONResponse:
    """An error the SDK of ``provider`` reads as the provider's own. ``retry=False`` adds ``x-should-retry:
    false``, which the OpenAI and Anthropic SDKs honour, so a refusal that will not change is not retried."""
    headers = {"x-mmtok-error": code or "proxy"}
    if not retry:
        headers["x-should-retry"] = "false"
    return JSONResponse(error_body(provider, status, f"mmtok proxy: {message}", code), status, headers=headers)


def forwarded_headers(headers: Any) -> dict[str, str]:
    """The caller's headers to send upstream: all but hop-by-hop ones and the proxy's own (``x-mmtok-*``, such as
    the tags header), credentials untouched."""
    return {
        k: v
        for k, v in headers.items()
        if k.lower() not in DROPPED_REQUEST_HEADERS and not k.lower().startswith("x-mmtok-")
    }


def returned_headers(headers: Any) -> list[tuple[str, str]]:
    """The upstream's response headers to give the caller (the body is sent decoded, so no content-encoding)."""
    return [(k, v) for k, v in headers.multi_items() if k.lower() not in DROPPED_RESPONSE_HEADERS]
