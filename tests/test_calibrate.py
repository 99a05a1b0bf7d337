"""Calibration recovers a provider's real image rule from its bills.

The test upstream (tests/upstream.py) bills images by rules that differ from mmtok's documented ones: gpt-4o tiles
at 100 + 190 (documented 85 + 170), gpt-4.1-mini at a 1,536-patch budget (documented 6,144), Claude Sonnet 4.5
capped at 1,200 tokens (documented 1,568), Gemini 2.5 Pro at a flat 258 per image (documented: 258 per 768-px tile).
The official SDKs call it through the proxy with photos of varied sizes, streamed and not; ``mmtok calibrate``
fits the ledger; with the sheet it writes, the proxy's predictions equal the bills on sizes it has not seen.
"""

from __future__ import annotations

import base64
import tomllib

import anthropic
import openai
import pytest
from google import genai
from typer.testing import CliRunner

from mmtok.budgets.calibrate import Observation, calibrate, fit_overhead
from mmtok.budgets.ledger import open_ledger
from mmtok.cli.main import app
from tests.upstream import Upstream, data_url, make_app, photo, running_proxy, serve

PROMPT = "Describe this picture in one sentence."
# fmt: off
TRAINING = {  # sizes seen by calibration: (w, h) per image of each call; () is a call without images
    "gpt-4o": [(512, 512), (800, 600), (1024, 1024), (1600, 900), (640, 1280), (2000, 1000), (300, 200),
               ((700, 700), (1200, 400)), (), (), ()],
    "gpt-4.1-mini": [(512, 512), (800, 600), (1024, 1024), (1600, 1200), (2000, 1500), (1400, 1400),
                     (1920, 1080), ((600, 900), (1700, 1300)), (), (), ()],
    "claude-sonnet-4-5": [(500, 500), (800, 600), (1000, 1000), (1092, 1092), (1400, 900), (1200, 800),
                          (1920, 1080), ((640, 480), (1300, 1000)), (), (), ()],
    "gemini-2.5-pro": [(300, 300), (800, 600), (1024, 1024), (1600, 900), (2000, 2000), ((640, 480), (900, 1600)),
                       (), ()],
}
# fmt: on
UNSEEN = {
    "gpt-4o": [(1500, 1500), (700, 300), (1280, 720)],
    "gpt-4.1-mini": [(1800, 1800), (900, 700), (1300, 1300)],
    "claude-sonnet-4-5": [(1100, 1100), (1500, 800), (700, 500)],
    "gemini-2.5-pro": [(1500, 1500), (700, 300)],
}


def _images(spec) -> list[tuple[int, int]]:
    if not spec:
        return []
    return list(spec) if isinstance(spec[0], tuple) else [spec]


def call(proxy: str, model: str, sizes: list[tuple[int, int]], stream: bool) -> None:
    """One call through the proxy with the provider's official SDK."""
    if model.startswith("gpt-4o"):
        client = openai.OpenAI(api_key="sk-test", base_url=proxy + "/v1", max_retries=0)
        content = [{"type": "text", "text": PROMPT}]
        content += [{"type": "image_url", "image_url": {"url": data_url(w, h), "detail": "high"}} for w, h in sizes]
        messages = [{"role": "user", "content": content}]
        if stream:
            list(
                client.chat.completions.create(
                    model=model, messages=messages, stream=True, stream_options={"include_usage": True}
                )
            )
        else:
            client.chat.completions.create(model=model, messages=messages)
    elif model.startswith("gpt-"):
        client = openai.OpenAI(api_key="sk-test", base_url=proxy + "/v1", max_retries=0)
        content = [{"type": "input_text", "text": PROMPT}]
        content += [{"type": "input_image", "image_url": data_url(w, h), "detail": "high"} for w, h in sizes]
        response = client.responses.create(model=model, input=[{"role": "user", "content": content}], stream=stream)
        if stream:
            list(response)
    elif model.startswith("claude"):
        client = anthropic.Anthropic(api_key="ak-test", base_url=proxy + "/anthropic", max_retries=0)
        content = [
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": "image/jpeg",
                    "data": base64.b64encode(photo(w, h)).decode(),
                },
            }
            for w, h in sizes
        ]
        content.append({"type": "text", "text": PROMPT})
        kwargs = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": content}]}
        if stream:
            with client.messages.stream(**kwargs) as events:
                events.get_final_message()
        else:
            client.messages.create(**kwargs)
    else:
        client = genai.Client(
            api_key="gk-test", http_options=genai.types.HttpOptions(base_url=proxy + "/gemini/", api_version="v1beta")
        )
        parts = [genai.types.Part.from_text(text=PROMPT)]
        parts += [genai.types.Part.from_bytes(data=photo(w, h), mime_type="image/jpeg") for w, h in sizes]
        contents = [genai.types.Content(role="user", parts=parts)]
        if stream:
            list(client.models.generate_content_stream(model=model, contents=contents))
        else:
            client.models.generate_content(model=model, contents=contents)


@pytest.fixture(scope="module")
def billed_ledger(tmp_path_factory):
    """A ledger of a few dozen calls per model, made through the proxy by the official SDKs."""
    folder = tmp_path_factory.mktemp("calibration")
    ledger = folder / "calls.sqlite"
    with serve(make_app(Upstream())) as upstream, running_proxy(upstream, ledger) as proxy:
        for model, calls in TRAINING.items():
            for n, spec in enumerate(calls):
                call(proxy, model, _images(spec), stream=n % 3 == 1)
    return folder, ledger, upstream


def test_calibration_recovers_each_upstream_rule_with_the_rules_own_parameters(billed_ledger):
    _, ledger, _ = billed_ledger
    fits = {m.model: m for m in calibrate(open_ledger(ledger).records(), source=str(ledger)).models}
    assert set(fits) == set(TRAINING)
    gemini = fits.pop("gemini-2.5-pro")  # mmtok counts Gemini 2.5's default images as billed, 258 (issue 36)
    assert gemini.documented is not None and gemini.documented.all_exact and not gemini.new_family
    for m in fits.values():
        assert m.documented is not None and not m.documented.all_exact, m.model  # the bills disagree
        assert m.fitted is not None and m.fitted.all_exact, (m.model, m.fitted)
        assert m.overhead is not None and m.overhead.exact and m.overhead.tokens(1) == 0, m.model
    assert dict((k, b) for k, _, b in fits["gpt-4o"].changed) == {"base_tokens": 100, "tile_tokens": 190}
    assert dict((k, b) for k, _, b in fits["gpt-4.1-mini"].changed) == {"levels.high.patch_budget": 1536}
    assert dict((k, b) for k, _, b in fits["claude-sonnet-4-5"].changed) == {"max_tokens": 1200}
    assert fits["gpt-4o"].worst is not None and fits["gpt-4o"].worst[1] > fits["gpt-4o"].worst[2]


def test_with_the_written_sheet_predictions_equal_the_bills_on_unseen_sizes(billed_ledger, tmp_path):
    _, ledger, _ = billed_ledger
    sheet = tmp_path / "calibrated.toml"
    result = CliRunner().invoke(app, ["calibrate", str(ledger), "--out", str(sheet)])
    assert result.exit_code == 0, result.output
    assert "gemini-2.5-pro" in result.output
    written = tomllib.loads(sheet.read_text())
    assert {f["match"][0] for f in written["family"]} >= set(TRAINING) - {"gemini-2.5-pro"}
    fresh = tmp_path / "after.sqlite"
    with serve(make_app(Upstream())) as upstream, running_proxy(upstream, fresh, prices=(sheet,)) as proxy:
        for model, sizes in UNSEEN.items():
            for n, size in enumerate(sizes):
                call(proxy, model, [size], stream=n == 1)
    rows = list(open_ledger(fresh).records())
    assert len(rows) == sum(len(s) for s in UNSEEN.values())
    for row in rows:
        assert row.outcome == "ok" and row.billed_input is not None, row.message
        assert row.predicted_input == row.billed_input, (row.model, row.parts, row.predicted, row.billed)
        assert row.predicted_label == "estimate" or row.predicted_label is not None


def test_without_the_sheet_the_documented_rules_miss_the_bills(billed_ledger):
    """Where the upstream's rule differs at every size (gpt-4o) every call with images is mispredicted; where it
    differs only for some sizes (a patch budget, a token cap) the others are not; Gemini 2.5's default images are
    counted as billed (258), so none of its calls is mispredicted."""
    _, ledger, _ = billed_ledger
    missed: dict[str, list[bool]] = {}
    for r in open_ledger(ledger).records():
        if any(p["kind"] == "image" for p in r.parts):
            missed.setdefault(r.model, []).append(r.predicted_input != r.billed_input)
    assert all(missed["gpt-4o"])
    assert not any(missed["gemini-2.5-pro"])
    assert any(missed["gpt-4.1-mini"]) and not all(missed["gpt-4.1-mini"])
    assert any(missed["claude-sonnet-4-5"]) and not all(missed["claude-sonnet-4-5"])


def test_overhead_is_measured_from_calls_without_images():
    plain = [Observation("m", (), 20 + 7 + 2 * m, 20, m) for m in (1, 2, 3, 1)]
    overhead = fit_overhead(plain)
    assert (overhead.per_request, overhead.per_message, overhead.exact) == (7, 2, True)
    assert fit_overhead([]) is None
