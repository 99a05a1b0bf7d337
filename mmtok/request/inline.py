"""Base64 media as it stands in a body, read by offset without decoding it whole.

Every 4 base64 characters are 3 bytes, so the bytes at any offset are decoded from the characters that hold them:
an image's header and end are measured from a few kilobytes of a part of many megabytes.
"""

from __future__ import annotations

import binascii

from mmtok.errors import MediaError

WHITESPACE = (" ", "\n", "\r", "\t")
URL_SAFE = str.maketrans("-_", "+/")  # the URL-safe alphabet (RFC 4648 section 5), as google-genai sends bytes
LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
ALPHABETS = {False: LETTERS + b"+/", True: LETTERS + b"-_"}


class Base64Bytes:
    """The bytes a base64 text stands for, read by offset (:class:`mmtok.headers.RandomAccess`)."""

    def __init__(self, text: str, where: str) -> None:
        if any(c in text for c in WHITESPACE):  # MIME-style line breaks: rare; the offsets need them gone
            text = "".join(text.split())
        self.where = where
        self.text = text
        self.url_safe = "-" in text or "_" in text
        _check_alphabet(text, self.url_safe, where)
        if len(text) % 4 == 1:
            raise MediaError(where, f"not valid base64: {len(text):,} characters cannot be whole 3-byte groups")
        padding = len(text) - len(text.rstrip("="))
        self.size = len(text) // 4 * 3 + {0: 0, 2: 1, 3: 2}[len(text) % 4] - padding

    def pread(self, n: int, offset: int) -> bytes:
        if n <= 0 or offset >= self.size:
            return b""
        first, last = offset // 3, min(offset + n, self.size)
        chars = self.text[first * 4 : -(-last // 3) * 4]
        if self.url_safe:
            chars = chars.translate(URL_SAFE)
        try:
            data = binascii.a2b_base64(chars + "=" * (-len(chars) % 4), strict_mode=True)
        except binascii.Error as e:
            raise MediaError(self.where, f"not valid base64 near byte {offset:,}: {e}") from None
        start = offset - first * 3
        return data[start : start + n]

    def read_all(self, limit: int) -> bytes:
        if self.size > limit:
            raise MediaError(self.where, f"{self.size:,} bytes inline: parts are read up to {limit:,}")
        return self.pread(self.size, 0)


def _check_alphabet(text: str, url_safe: bool, where: str) -> None:
    """Every character base64 (of one alphabet, not both), padding only at the end: checked over the whole text
    without decoding it (a translate pass, about half the time json.loads takes to read the same text)."""
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError as e:
        raise MediaError(where, f"not valid base64: a non-ASCII character at {e.start:,}") from None
    body = raw.rstrip(b"=")
    if len(raw) - len(body) > 2:
        raise MediaError(where, "not valid base64: more than two '=' at its end")
    stray = body.translate(None, ALPHABETS[url_safe])
    if stray:
        at = body.index(stray[:1])
        what = "both the standard and the URL-safe alphabet" if url_safe and stray[:1] in b"+/" else repr(chr(stray[0]))
        raise MediaError(where, f"not valid base64: {what} at character {at:,}")
