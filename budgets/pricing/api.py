"""The pricing functions the package exports: :func:`price` (paths, media, token sequences and text as one request),
:func:`price_requests` (a batch of requests on several models, never raising) and :func:`file_requests` (one
request per file under folders). ``mmtok.budgets.pricing`` re-exports them, with the names below."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from mmtok.budgets.pricing.counts import Attachment
from mmtok.budgets.pricing.models import PriceSheets, resolve
from mmtok.budgets.pricing.options import Options, request_options
from mmtok.budgets.pricing.quote import Quote
from mmtok.budgets.pricing.quoting import make_quote
from mmtok.errors import MediaError, MmtokError, PriceError
from mmtok.media import Text, iter_files, load

__all__ = ["file_requests", "price", "price_requests"]


# ------------------------------------------------------------------------------------------------------- price
def _describe(item: Any) -> str:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    path = getattr(item, "path", None)
    if path is not None:
        return str(path)
    if isinstance(item, Text):
        return "<text>"
    return f"<{type(item).__name__}>"


def _attachments(items: Any, text: str | None, allow_empty: bool = False) -> list[Attachment]:
    if items is None:
        items = []
    elif isinstance(items, (str, os.PathLike)) or not isinstance(items, (list, tuple)):
        items = [items]
    out = []
    for item in items:
        if isinstance(item, Attachment):  # named by the caller (a URL, stdin)
            out.append(item)
        elif not isinstance(item, (str, os.PathLike)):
            out.append(Attachment(_describe(item), item))
        elif os.fspath(item).endswith(".safetensors"):  # a token file: its sequences (headers) are the attachments
            from mmtok.token_files import read_token_headers  # headers only: no tensor is read

            sequences = read_token_headers(item)
            single = len(sequences) == 1
            out += [
                Attachment(os.fspath(item) if single else f"{os.fspath(item)}[{k}]", s) for k, s in sequences.items()
            ]
        else:
            out.append(Attachment(os.fspath(item), load(item)))
    if text is not None:
        out.append(Attachment("<text>", Text.from_string(text)))
    if not out and not allow_empty:
        raise PriceError("nothing to price: pass paths, media objects, TokenSequences or text=...")
    return out


def price(
    items: Any = None,
    model: str = "gpt-4o",
    *,
    text: str | None = None,
    detail: str | None = None,
    at: dt.date | str | None = None,
    batch: bool = False,
    tier: str | None = None,
    output_tokens: int = 0,
    output_audio: bool = False,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
    text_tokens: int = 0,
    prices: PriceSheets = (),
) -> Quote:
    """Price one request on one model.

    ``items``: a file path, a loaded ``Image``/``Audio``/``Video``/``Text``, a ``TokenSequence`` (mmtok-* models), or
    a list of them; with ``text``, they form one request. ``detail``: OpenAI low/high/original/auto, or a Gemini
    media_resolution level. ``at``: the price on a past date. ``batch`` / ``tier`` ("flex", "priority"): the
    provider's discounted or priority rates. ``output_tokens``: the output, counted once, at the audio-output rate
    with ``output_audio``. ``cached_input_tokens`` / ``cache_write_tokens``: more input tokens read from / written to
    the prompt cache. ``text_tokens``: more text input tokens, of a prompt whose size you know. ``prices``: your own
    sheets (their rows and aliases override).
    """
    options = request_options(
        detail, at, batch, tier, output_tokens, output_audio, cached_input_tokens, cache_write_tokens, text_tokens
    )
    given = options.text_tokens + options.cached_input_tokens + options.cache_write_tokens
    attachments = _attachments(items, text, allow_empty=given > 0)
    label = attachments[0][0] if len(attachments) == 1 else f"request of {len(attachments)} parts"
    label = label if attachments else "<text>"
    return make_quote(resolve(model, prices), attachments, options, label)


def price_requests(
    requests: Iterable[tuple[str, list[str | os.PathLike[str]]]],
    models: Sequence[str],
    options: Options,
    *,
    text: str | None = None,
    prices: PriceSheets = (),
) -> Iterator[tuple[str, MmtokError | list[Quote | MmtokError]]]:
    """Price each (label, paths) request, with ``text``, on every model; each file is read once. A file that cannot
    be read fails its request (one error in place of the list); a model that cannot price a request is an error in
    its place in the list. Nothing is raised, so a batch always finishes."""
    resolved = [resolve(m, prices) for m in models]  # bad names fail here, before any work
    for label, paths in requests:
        try:
            attachments = _attachments(paths, text)
        except MmtokError as e:
            yield label, e
            continue
        results: list[Quote | MmtokError] = []
        for model in resolved:
            try:
                results.append(make_quote(model, attachments, options, label))
            except MmtokError as e:
                results.append(e)
        yield label, results


def file_requests(
    paths: Iterable[str | os.PathLike[str]], extra: Sequence[str | os.PathLike[str]] = ()
) -> Iterator[tuple[str, list[str | os.PathLike[str]] | MediaError]]:
    """One request per file under ``paths`` (folders walked), each with the ``extra`` attachments."""
    for item in iter_files(paths):
        if isinstance(item, MediaError):
            yield str(item.source), item
        else:
            yield str(item), [item, *extra]
