"""What a request costs on a model: tokens per attachment and modality, exact decimal costs, the working, the source.

    >>> quote = price(["photo.jpg", "talk.wav"], text="Summarise.", model="gemini-3.1-pro-preview")  # doctest: +SKIP
    >>> quote.tokens("image"), quote.total_cost, quote.lines[0].working                        # doctest: +SKIP

A request is one API call: its text and attachments are input, ``output_tokens`` are counted once, cached and
cache-write tokens are priced at their own rates, and the long-context tier is chosen from the whole request's input.
Token rules come from ``families.toml`` (each with its source, the date it was read and a label; ``formulas.py``
computes them); money from genai-prices, LiteLLM's map, or a price sheet (``money.py``, ``sheets.py``,
``prices/*.toml``); capabilities and retirement dates from the model catalog (``catalog.py``, ``data/models.json``).
Media are read from headers only (``mmtok.load``), so pricing a folder of photos never decodes a pixel. An
attachment the model cannot take is listed in ``missing`` and the quote is incomplete, never priced at zero.

The package holds every part of pricing: rules (``formulas``, ``families.toml``, ``overheads``, ``text``,
``documents``, ``formats``), money (``money``, ``sheets``, ``litellm``, ``catalog``, ``status``, ``listing``) and the
quote (``counts``, ``models``, ``options``, ``quote``, ``quoting``, ``requests``, ``batch``, ``api``).

The names below are imported on first use (PEP 562), so a module that needs one part (the shrinker's formats, the
hook's text count) does not load the rest, and ``mmtok price --help`` starts without the price sheets.
"""

from __future__ import annotations

from mmtok.lazy import lazy_exports

_LAZY = {
    "DETAIL_LEVELS": ".options",
    "INPUT_RATES": ".models",
    "OUTPUT_KINDS": ".quote",
    "Line": ".quote",
    "Model": ".models",
    "Options": ".options",
    "PriceSheets": ".models",
    "Quote": ".quote",
    "file_requests": ".api",
    "image_token_count": ".counts",
    "image_tokens": ".counts",
    "model_image_count": ".counts",
    "price": ".api",
    "price_request": ".requests",
    "price_requests": ".api",
    "quote_request": ".requests",
    "rate_card": ".models",
    "resolve": ".models",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
