"""``--shrink``: a call's media replaced in flight by their cheapest renditions that meet the ``--keep`` bars, by
:func:`mmtok.budgets.shrink.request.shrink_request` (the call ``mmtok shrink body.json`` makes), on a worker
thread. The call goes on with the new body, its prediction is the new body's, and the ledger row and the
``x-mmtok-shrink`` header say what was saved. A body whose media cannot be shrunk goes as it came, and says why."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mmtok.budgets.proxy.config import ProxyConfig
from mmtok.budgets.proxy.providers import COUNT_APIS, Route
from mmtok.budgets.proxy.quoting import Prediction, fill_from_quote
from mmtok.errors import MmtokError

MEDIA_KINDS = frozenset({"image", "audio", "video"})


@dataclass
class Shrunk:
    """What shrinking did to one call."""

    content: bytes  # the body to send
    summary: dict[str, Any] = field(default_factory=dict)  # for the ledger
    saved_cost: Decimal | None = None
    header: str = ""


def wanted(config: ProxyConfig, where: Route, prediction: Prediction) -> bool:
    """Whether a call is one to shrink: --shrink, a generating API, media in the body."""
    if not config.shrink or where.api in COUNT_APIS:
        return False
    return any(p.get("kind") in MEDIA_KINDS and not p.get("uncountable") for p in prediction.parts)


def shrink_call(payload: dict[str, Any], where: Route, config: ProxyConfig, prediction: Prediction) -> Shrunk | str:
    """The shrunk body and what was saved, or why the body goes as it came. ``prediction`` becomes the new
    body's."""
    from mmtok.budgets.shrink.request import shrink_request
    from mmtok.media.remote import UrlPolicy
    from mmtok.request import Policy

    policy = Policy(urls=UrlPolicy(read=config.read_urls, allow_private=config.allow_private))
    try:
        result = shrink_request(
            payload, where.model or prediction.model, keep=list(config.keep) or None, prices=config.prices,
            policy=policy, source=where.upstream_path,
        )  # fmt: skip
    except MmtokError as e:
        return f"shrink: {e}"
    changed = [(where_, r) for where_, r in result.parts if r.status != "kept"]
    if not changed:
        return "shrink: no rendition met the bars for less" if result.parts else "shrink: nothing to shrink"
    before, after = result.before, result.after
    fill_from_quote(prediction, after)
    saved = before.total_cost - after.total_cost
    summary = {
        "input_tokens_before": before.input_tokens,
        "input_tokens_after": after.input_tokens,
        "cost_before": str(before.total_cost),
        "cost_after": str(after.total_cost),
        "parts": [{"where": w, "status": r.status, "did": r.action, "measures": r.measures} for w, r in changed],
        "left": result.left,
    }
    header = (
        f"{len(changed)} part(s) shrunk: {before.input_tokens:,} -> {after.input_tokens:,} input tokens, "
        f"${saved:.6f} saved"
    )
    return Shrunk(json.dumps(result.body, separators=(",", ":")).encode(), summary, saved, header)


async def shrink_async(
    payload: dict[str, Any], where: Route, config: ProxyConfig, prediction: Prediction
) -> Shrunk | str:
    """``shrink_call`` on a worker thread: measuring renditions takes a while and must not stall other calls."""
    try:
        return await asyncio.to_thread(shrink_call, payload, where, config, prediction)
    except Exception as e:  # a fault in shrinking must not stop the call: it goes as it came
        return f"shrink failed ({type(e).__name__}: {e}): please report it"
