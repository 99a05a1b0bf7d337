"""Tokens a provider adds to a request beyond its parts (``overheads.toml``, beside this module): OpenAI's message
framing, the tool-use system prompt Anthropic adds when a body gives tools. Each comes with its source, read date and
label."""

from __future__ import annotations

import fnmatch
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmtok.budgets.pricing import formulas as F
from mmtok.budgets.pricing.counts import Attachment, Given
from mmtok.budgets.pricing.models import Model

if TYPE_CHECKING:
    from mmtok.request import Request

OVERHEADS_FILE = Path(__file__).resolve().parent / "overheads.toml"
MAX_KEPT_FRAMING = 64  # roles and names (16 characters each on average) a kept framing may hold: names come from
# bodies, which must not fill the cache with their text


@functools.cache
def _table() -> dict[str, Any]:
    import tomllib

    return tomllib.loads(OVERHEADS_FILE.read_text(encoding="utf-8"))


def overheads(request: Request, model: Model) -> list[Attachment]:
    """The overhead lines ``request`` costs on ``model`` (none where nothing is published for it)."""
    found = []
    chat = _table()["openai_chat_messages"]
    if request.api == "openai-chat" and model.provider in chat["providers"] and request.messages:
        framed = (model.text_rule, request.framing, request.messages, request.named_messages)
        small = len(request.framing) <= MAX_KEPT_FRAMING and sum(map(len, request.framing)) <= MAX_KEPT_FRAMING * 16
        found.append(message_framing(*framed) if small else message_framing.__wrapped__(*framed))
    calibrated = model.family.overhead if model.family else {}
    if calibrated:  # a calibration sheet's family (mmtok calibrate) measured what bills carry beyond these rules
        found.append(_calibrated(request, model, calibrated))
    tool = _tool_prompt(request, model)
    if tool is not None:
        found.append(tool)
    return found


@functools.lru_cache(maxsize=1024)
def message_framing(text_rule: str, framing: tuple[str, ...], messages: int, names: int) -> Attachment:
    """OpenAI's framing of Chat Completions messages: each message's role and name encoded as text, and fixed tokens
    per message, per name and to prime the reply (the cookbook's ``num_tokens_from_messages``). Kept per (text rule,
    roles and names, messages, names): its only inputs, which most calls repeat."""
    from mmtok.budgets.pricing.text import count_text

    rule = _table()["openai_chat_messages"]
    words = sum(count_text(word, text_rule).tokens for word in framing)
    tokens = words + rule["per_message"] * messages + rule["per_name"] * names + rule["per_reply"]
    working = (
        f"roles and names {words} + {rule['per_message']} per message x {messages}"
        + (f" + {rule['per_name']} per name x {names}" if names else "")
        + f" + {rule['per_reply']} to prime the reply = {tokens} ({rule['cite']}, read {rule['read']})"
    )
    return Attachment("<message framing>", Given("text", F.TokenCount(tokens, working, rule["label"])))


def _calibrated(request: Request, model: Model, overhead: dict[str, int]) -> Attachment:
    per_request, per_message = overhead.get("per_request", 0), overhead.get("per_message", 0)
    tokens = per_request + per_message * request.messages
    family = model.family
    assert family is not None
    working = (
        f"{per_request} per request + {per_message} per message x {request.messages} = {tokens}, what bills carry "
        f"beyond the rules' count (calibrated: family {family.name}, {family.source or 'a price sheet'})"
    )
    return Attachment("<calibrated overhead>", Given("text", F.TokenCount(tokens, working, "estimate")))


def _tool_prompt(request: Request, model: Model) -> Attachment | None:
    rule = _table()["anthropic_tool_prompt"]
    if request.tools == 0 or model.provider != "anthropic":
        return None
    pair = next((v for pattern, v in rule["tokens"].items() if fnmatch.fnmatchcase(model.name, pattern)), None)
    if pair is None:
        return None
    forced = request.tool_choice in ("any", "tool")
    tokens = pair[forced]
    choice = request.tool_choice or "auto"
    working = f"tool-use system prompt, tool_choice {choice}: {tokens} ({rule['cite']}, read {rule['read']})"
    return Attachment("<tool prompt>", Given("text", F.TokenCount(tokens, working, rule["label"])))
