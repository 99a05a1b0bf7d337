"""Base64 media as it stands in a body, read by offset without decoding it whole.

Every 4 base64 characters are 3 bytes, so the bytes at any offset are decoded from the characters that hold them:
an image's header and end are measured from a few kilobytes of a part of many megabytes.
"""

from __future__ import annotations

import binascii

from mmtok.errors import MediaError

WHITESPACE = (" ", "\n", "\r", "\t")
URL_SAFE = str.maketrans("-_", "+/")  # the URL-safe alphabet (RFC 4648 section 5), as google-genai sends bytes


class Base64Bytes:
    """The bytes a base64 text stands for, read by offset (:class:`mmtok.headers.RandomAccess`)."""

    def __init__(self, text: str, where: str) -> None:
        if any(c in text for c in WHITESPACE):  # MIME-style line breaks: rare; the offsets need them gone
            text = "".join(text.split())
        self.where = where
        self.text = text
        self.url_safe = "-" in text or "_" in text
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
