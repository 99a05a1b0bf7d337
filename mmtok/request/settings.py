"""What a body asks of the reply, read and checked once for every caller: the output limit, how many replies, in
which modalities, how the model thinks first; and the values a provider refuses with HTTP 400.

Fields and ranges as each provider's reference and its SDK (the docstrings of openai 3.63, anthropic 2.17 and
google-genai 3.6, generated from the API references) give them, read 2026-12-05:

- OpenAI Chat Completions (developers.openai.com/api/reference/chat/create): ``max_completion_tokens`` ("an upper
  bound for the number of tokens that can be generated for a completion, including visible output tokens and
  reasoning tokens"), the older ``max_tokens``; ``n`` ("you are billed for generated tokens across all choices");
  ``modalities`` ``["text", "audio"]`` with ``audio``. The API refuses ``max_tokens`` below 1 ("Invalid
  'max_tokens': integer below minimum value. Expected a value >= 1") or not an integer ("Invalid type for
  'max_tokens': expected an integer, but got a string instead"), and ``n`` above 128 ("Invalid 'n': integer above
  maximum value. Expected a value <= 128"), as users quote the answers (github.com/Skytliang/Multi-Agents-Debate#8,
  diffbot/code-gpt-docs#273, thisisartium/continuous-alignment-testing#25).
- OpenAI Responses (.../responses/create): ``max_output_tokens``, reasoning included, at least 16.
- Anthropic Messages (platform.claude.com/docs/en/api/messages): ``max_tokens`` ("Set to 0 to populate the prompt
  cache without generating a response"; "A request that uses server tools can call the model more than once, so
  ``usage.output_tokens`` can exceed ``max_tokens``"); ``thinking`` ``{"type": "enabled", "budget_tokens"}``
  ("Must be >= 1024 and less than ``max_tokens``"; "Thinking tokens count toward your ``max_tokens`` limit") or
  ``{"type": "adaptive"}``; ``cache_control`` on blocks and at the top level (prompt caching).
- Gemini generateContent (ai.google.dev/api/generate-content): ``generationConfig.maxOutputTokens``,
  ``candidateCount`` (1-8 on Google's model pages), ``responseModalities`` (TEXT, IMAGE, AUDIO),
  ``thinkingConfig.thinkingBudget`` ("0 is DISABLED. -1 is AUTOMATIC") or ``thinkingLevel``; ``cachedContent``.

A limit larger than any provider's integer field (2,147,483,647) is refused here; one above the model's own maximum
is checked by pricing, which knows the model.
"""

from __future__ import annotations

from typing import Any

from mmtok.request.types import Invalid, OutputAsk

INT32_MAX = 2_147_483_647  # the providers' integer fields are 32-bit
OPENAI_MAX_N = 128
GEMINI_MAX_CANDIDATES = 8
ANTHROPIC_MIN_THINKING = 1024
OPENAI_MODALITIES = frozenset({"text", "audio"})
GEMINI_MODALITIES = {"text": "text", "image": "image", "audio": "audio", "modality_unspecified": None}
ANTHROPIC_SERVER_TOOLS = ("web_search", "web_fetch", "code_execution", "tool_search", "advisor")


class Reading:
    """The settings found in one body and the values the provider would refuse."""

    def __init__(self) -> None:
        self.invalid: list[Invalid] = []
        self.notes: list[str] = []

    def count(
        self, obj: dict[str, Any], keys: tuple[str, ...], minimum: int, shown: str = ""
    ) -> tuple[int | None, str]:
        """The first of ``keys`` set in ``obj`` (null is unset), checked: an integer from ``minimum`` up; a value the
        provider refuses is recorded and read as unset. Returns (value, the key that held it)."""
        for key in keys:
            value = obj.get(key)
            if value is None:
                continue
            param = f"{shown}{key}"
            if isinstance(value, bool) or not isinstance(value, int):
                self.invalid.append(Invalid(param, f"must be an integer, got {_kind(value)}"))
            elif value < minimum:
                self.invalid.append(Invalid(param, f"must be at least {minimum}, got {value:,}"))
            elif value > INT32_MAX:
                self.invalid.append(Invalid(param, f"must be at most {INT32_MAX:,}, got {_short(value)}"))
            else:
                return value, key
            return None, key
        return None, ""

    def at_most(self, value: int | None, key: str, maximum: int, shown: str = "") -> int | None:
        if value is not None and value > maximum:
            self.invalid.append(Invalid(f"{shown}{key}", f"must be at most {maximum:,}, got {value:,}"))
            return None
        return value


def _kind(value: Any) -> str:
    """A JSON value's type in words, with the value where it is short: ``a string ('100')``, ``a number (1.5)``."""
    if isinstance(value, str):
        return f"a string ({value[:20]!r}{'...' if len(value) > 20 else ''})"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, float):
        return f"a decimal number ({value:g})"
    return {dict: "an object", list: "an array"}.get(type(value), type(value).__name__)


def _short(value: int) -> str:
    """A huge integer without printing all its digits: ``a 4,000-digit integer``."""
    digits = len(str(value))
    return f"{value:,}" if digits <= 15 else f"a {digits:,}-digit integer"


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------------------------- OpenAI
def openai_chat(body: dict[str, Any]) -> tuple[OutputAsk, tuple[Invalid, ...]]:
    found = Reading()
    limit, field = found.count(body, ("max_completion_tokens", "max_tokens"), 1)
    n, n_field = found.count(body, ("n",), 1)
    n = found.at_most(n, "n", OPENAI_MAX_N)
    modalities = _openai_modalities(found, body.get("modalities"))
    ask = OutputAsk(limit, field, n or 1, n_field if n else "", modalities, notes=tuple(found.notes))
    return ask, tuple(found.invalid)


def _openai_modalities(found: Reading, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(m, str) and m in OPENAI_MODALITIES for m in value):
        found.invalid.append(Invalid("modalities", f'must be a list of "text" and "audio", got {_kind(value)}'))
        return ()
    return tuple(dict.fromkeys(value))


def openai_responses(body: dict[str, Any]) -> tuple[OutputAsk, tuple[Invalid, ...]]:
    found = Reading()
    limit, field = found.count(body, ("max_output_tokens",), 16)
    return OutputAsk(limit, field), tuple(found.invalid)


# ------------------------------------------------------------------------------------------------- Anthropic
def anthropic_messages(body: dict[str, Any]) -> tuple[OutputAsk, tuple[Invalid, ...]]:
    found = Reading()
    limit, field = found.count(body, ("max_tokens",), 0)
    thinking = _mapping(body.get("thinking"))
    kind, budget = thinking.get("type"), None
    if kind == "enabled":
        budget, _ = found.count(thinking, ("budget_tokens",), ANTHROPIC_MIN_THINKING, "thinking.")
        if budget is not None and limit is not None and budget >= limit:
            found.invalid.append(
                Invalid("thinking.budget_tokens", f"must be less than max_tokens ({limit:,}), got {budget:,}")
            )
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    server = any(str(_mapping(t).get("type", "")).startswith(ANTHROPIC_SERVER_TOOLS) for t in tools)
    modes = {"enabled": "budget", "adaptive": "adaptive", "disabled": "off"}
    mode = modes.get(kind, "") if isinstance(kind, str) else ""
    return OutputAsk(limit, field, thinking=mode, thinking_budget=budget, server_tools=server), tuple(found.invalid)


# ---------------------------------------------------------------------------------------------------- Gemini
def gemini_config(config: dict[str, Any], shown: str = "generationConfig.") -> tuple[OutputAsk, tuple[Invalid, ...]]:
    """A generateContent ``generationConfig`` (or an Interactions ``generation_config``), snake or camel case."""
    found = Reading()
    limit, field = found.count(config, ("maxOutputTokens", "max_output_tokens"), 0, shown)
    if limit == 0:
        found.notes.append(f"{shown}{field} is 0, which limits nothing: bounded at the model's maximum")
        limit, field = None, ""
    count, count_field = found.count(config, ("candidateCount", "candidate_count"), 1, shown)
    count = found.at_most(count, count_field, GEMINI_MAX_CANDIDATES, shown)
    modalities = _gemini_modalities(found, config, shown)
    thinking, budget = _gemini_thinking(found, config, shown)
    ask = OutputAsk(limit, f"{shown}{field}" if field else "", count or 1, f"{shown}{count_field}" if count else "",
                    modalities, thinking, budget, notes=tuple(found.notes))  # fmt: skip
    return ask, tuple(found.invalid)


def _gemini_modalities(found: Reading, config: dict[str, Any], shown: str) -> tuple[str, ...]:
    key = "responseModalities" if "responseModalities" in config else "response_modalities"
    value = config.get(key)
    if value is None:
        return ()
    names = [GEMINI_MODALITIES.get(m.lower(), "?") if isinstance(m, str) else "?" for m in _as_list(value)]
    if "?" in names:
        found.invalid.append(Invalid(f"{shown}{key}", f"must be a list of TEXT, IMAGE and AUDIO, got {_kind(value)}"))
        return ()
    return tuple(dict.fromkeys(n for n in names if n))


def _gemini_thinking(found: Reading, config: dict[str, Any], shown: str) -> tuple[str, int | None]:
    thinking = _mapping(config.get("thinkingConfig", config.get("thinking_config")))
    if isinstance(thinking.get("thinkingLevel", thinking.get("thinking_level")), str):
        return "level", None
    budget, _ = found.count(thinking, ("thinkingBudget", "thinking_budget"), -1, f"{shown}thinkingConfig.")
    if budget is None:
        return "", None
    return {-1: ("dynamic", None), 0: ("off", None)}.get(budget, ("budget", budget))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
