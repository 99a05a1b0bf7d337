"""Who made a call: a fingerprint of the caller's key and the call's tags, for the ledger and per-key and per-tag
budgets.

The key is never stored. Its fingerprint is what provider consoles show of a key, its last 4 characters (only for
keys of 16 characters or more: a short secret would be shown whole), and a salted hash (HMAC-SHA256 under the
ledger's own salt, 12 hex digits) that tells keys with the same ending apart: ``...x7Qa-3f9a1c2b7e4d``. The salt
is kept in the ledger, so every proxy on one ledger names a key alike, and two ledgers' fingerprints of one key
differ. The key is read where each SDK sends it: ``Authorization: Bearer`` (OpenAI), ``x-api-key`` (Anthropic),
``x-goog-api-key`` or the ``key`` query parameter (Gemini).

Tags come from the ``x-mmtok-tags`` header (``team=search,app=bot``; the proxy removes it before forwarding) and from
the body's own fields: OpenAI's ``metadata`` (16 string pairs, keys up to 64 characters, values up to 512),
``safety_identifier`` and the older ``user`` (as ``user``), Anthropic's ``metadata.user_id`` (as ``user``), Vertex
AI's ``labels``. The header wins where both name a tag. A malformed header is the client's error (a 400 naming it);
body fields that are not short strings are left out. Tags are attribution a client gives: per-tag budgets trust it,
per-key budgets do not need to.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

TAGS_HEADER = "x-mmtok-tags"
TAG_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_TAGS = 16
MAX_TAG_VALUE = 512
MAX_TAGS_HEADER = 4096
SHOWN_KEY_CHARS = 4
MIN_SHOWN_KEY = 16  # a key this long or longer shows its last 4 characters


class BadTags(ValueError):
    """The ``x-mmtok-tags`` header cannot be read; the message says why."""


def key_of(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The caller's API key, where its SDK sends it; None without one."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    for name in ("x-api-key", "x-goog-api-key"):
        if headers.get(name, "").strip():
            return headers[name].strip()
    return query.get("key") or None


def fingerprint(key: str | None, salt: str) -> str | None:
    """``...abcd-<12 hex>``: the key's last 4 characters and its salted hash (only the hash for a short key)."""
    if not key:
        return None
    digest = hmac.new(salt.encode(), key.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:12]
    if len(key) < MIN_SHOWN_KEY:
        return digest
    return f"...{key[-SHOWN_KEY_CHARS:]}-{digest}"


def header_tags(value: str | None) -> dict[str, str]:
    """``team=search,app=bot`` as a dict, or :class:`BadTags` naming what is wrong."""
    if value is None or not value.strip():
        return {}
    if len(value) > MAX_TAGS_HEADER:
        raise BadTags(f"{TAGS_HEADER} is {len(value):,} characters; at most {MAX_TAGS_HEADER:,}")
    tags: dict[str, str] = {}
    for item in value.split(","):
        name, equals, tag = (piece.strip() for piece in item.partition("="))
        if not equals or not TAG_NAME.match(name) or not tag:
            raise BadTags(f"{TAGS_HEADER}: {item.strip()[:80]!r} is not NAME=VALUE (names: letters, digits, _ . -)")
        if len(tag) > MAX_TAG_VALUE or not tag.isprintable():
            raise BadTags(f"{TAGS_HEADER}: the value of {name} is over {MAX_TAG_VALUE} characters or not printable")
        tags[name] = tag
    if len(tags) > MAX_TAGS:
        raise BadTags(f"{TAGS_HEADER} has {len(tags)} tags; at most {MAX_TAGS}")
    return tags


def body_tags(body: Any) -> dict[str, str]:
    """The tags a request body gives itself (see the module's docstring); anything else in it is left out."""
    if not isinstance(body, dict):
        return {}
    found: dict[str, Any] = {}
    for field in ("metadata", "labels"):
        pairs = body.get(field)
        if isinstance(pairs, dict):
            found |= {k: v for k, v in pairs.items() if k != "user_id"}
            if "user_id" in pairs:
                found["user"] = pairs["user_id"]
    for field in ("user", "safety_identifier"):
        if field in body:
            found["user"] = body[field]
    tags = {k: v for k, v in found.items() if _tag(k, v)}
    return dict(list(tags.items())[:MAX_TAGS])


def _tag(name: Any, value: Any) -> bool:
    return isinstance(name, str) and bool(TAG_NAME.match(name)) and isinstance(value, str) and 0 < len(value) <= 512


def call_tags(headers: Mapping[str, str], body: Any) -> dict[str, str]:
    """The call's tags: the body's, then the header's over them (:class:`BadTags` for a bad header)."""
    tags = body_tags(body) | header_tags(headers.get(TAGS_HEADER))
    return dict(sorted(tags.items())[:MAX_TAGS])
