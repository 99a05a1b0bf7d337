"""Whether a file could be a request body, from its first bytes alone, without importing the body readers: the CLI
asks this of every input it is given (a photo is not one), so the answer costs no import of ``detect``."""

from __future__ import annotations

MAX_BODY_BYTES = 256 * 1024 * 1024  # larger than any provider accepts (OpenAI 512 MB of images is across parts)


def looks_like_body(data: bytes) -> bool:
    """Whether a file's first bytes can begin a JSON object (cheap: before it is parsed); a UTF-8 byte order mark
    and any amount of leading white space within the first 4 KiB are passed over."""
    return data[:4096].removeprefix(b"\xef\xbb\xbf").lstrip()[:1] == b"{"
