"""Each provider's PDF rule, page by page, against its worked numbers; limits checked before anything is counted."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.budgets.pricing import documents as D
from mmtok.budgets.pricing import resolve
from mmtok.budgets.pricing.text import count_text
from mmtok.cli.main import app
from mmtok.errors import PriceError
from mmtok.eval.bench.documents import PageSpec, scanned_page, write_pdf

TEXT = ("Master services agreement between the parties.", "Payment terms: net 30 days from the invoice date.")


@pytest.fixture(scope="module")
def letter(tmp_path_factory):
    """Three Letter pages: text, a scan without a text layer, text again."""
    scan = (scanned_page(["SCANNED"], 425, 550), 425, 550)
    path = tmp_path_factory.mktemp("pdf") / "letter.pdf"
    path.write_bytes(write_pdf([PageSpec(lines=TEXT), PageSpec(scan=scan), PageSpec(lines=TEXT)]))
    return mmtok.load(path)


def parts(model: str, doc, detail: str | None = None) -> dict[str, object]:
    counted, note = D.document_parts(resolve(model), doc, detail)
    return {modality: count for modality, count, _ in counted} | {"note": note}


def test_gemini_3_bills_each_page_its_media_resolution_budget_and_not_the_text(letter):
    default = parts("gemini-3.1-pro-preview", letter)
    assert default["image"].tokens == 3 * 560 and default["image"].label == "upper bound"
    assert "text" not in default and "the text layer is not billed" in default["image"].working
    assert parts("gemini-3.1-pro-preview", letter, "low")["image"].tokens == 3 * 280
    assert parts("gemini-3.1-pro-preview", letter, "high")["image"].tokens == 3 * 1120
    with pytest.raises(PriceError, match="must be low, medium or high"):
        parts("gemini-3.1-pro-preview", letter, "ultra_high")


def test_gemini_2_5_bills_256_a_page_at_its_levels_and_the_text_layer(letter):
    counted = parts("gemini-2.5-flash", letter)
    # a scanned page's OCR text is billed and cannot be counted here: the count is a lower bound, not "documented"
    assert counted["image"].tokens == 3 * 256 and counted["image"].label == "lower bound"
    assert counted["text"].tokens == 2 * math.ceil(len("\n".join(TEXT)) / 4) and counted["text"].label == "estimate"
    assert "OCR is billed too, and not counted" in counted["note"]  # the scanned page
    assert parts("gemini-2.5-flash", letter, "low")["image"].tokens == 3 * 64


def test_gemini_2_0_bills_258_tokens_a_page(letter):
    counted = parts("gemini-2.0-flash", letter)
    assert counted["image"].tokens == 3 * 258 and counted["image"].label == "documented" and "text" not in counted
    assert "1275x1650: 258 per page" in counted["image"].working


def test_anthropic_bills_the_text_layer_and_each_page_in_the_standard_box(letter):
    text_tokens = 2 * count_text("\n".join(TEXT), "cl100k_base").tokens
    for model in ("claude-haiku-4-5", "claude-opus-4-7"):  # a standard and a high-resolution model alike
        counted = parts(model, letter)
        # 612 x 792 pt at 150 dpi = 1275 x 1650 px -> fit 1,568 px / 1,568 tokens: 952 x 1232 -> 34 x 44 patches
        assert counted["image"].tokens == 3 * 34 * 44 and counted["image"].label == "estimate"
        assert counted["text"].tokens == text_tokens and counted["text"].label == "estimate"


def test_openai_bills_text_and_pages_at_low_detail_before_gpt_5_6(letter):
    text_tokens = 2 * count_text("\n".join(TEXT), "o200k_base").tokens
    counted = parts("gpt-4o", letter)
    assert counted["image"].tokens == 3 * 85 and counted["text"].tokens == text_tokens  # auto is low: 85 a page
    # high: 1275 x 1650 -> short side 768: 768 x 993 -> 2 x 2 tiles -> 85 + 170 x 4 = 765 a page
    assert parts("gpt-4o", letter, "high")["image"].tokens == 3 * 765


def test_openai_auto_is_high_from_gpt_5_6(letter):
    # 1275 x 1650 -> 40 x 52 = 2,080 patches (under the 2,500 budget) x 1.2 = 2,496 a page
    assert parts("gpt-5.6", letter)["image"].tokens == 3 * 2496
    assert parts("gpt-5.6", letter, "low")["image"].tokens < 3 * 2496


def test_self_hosted_models_count_pages_rendered_at_150_dpi(letter):
    # Qwen2.5-VL: 1275 x 1650 -> smart_resize 1288 x 1652 -> 46 x 59 = 2,714 a page; exact for what mmtok renders
    qwen = parts("qwen2.5-vl-7b", letter)
    assert qwen["image"].tokens == 3 * 2714 and qwen["image"].label == "exact" and "text" not in qwen
    assert parts("mmtok-semantic", letter)["image"].tokens == 3 * 6 * 8  # 224-px patches
    assert parts("llava-1.5-7b", letter)["image"].tokens == 3 * 576


def test_a_provider_without_a_pdf_rule_is_refused_not_guessed(letter):
    with pytest.raises(PriceError, match="grok-4 has no published PDF rule"):
        parts("grok-4", letter)


def test_a_page_selection_is_priced_as_sent(letter):
    counted = parts("gemini-3.1-pro-preview", letter.select([1, 3]))
    assert counted["image"].tokens == 2 * 560 and "pages 1,3 of 3" in counted["note"]


def test_anthropic_page_limit_follows_the_context_window(tmp_path):
    path = tmp_path / "long.pdf"
    path.write_bytes(write_pdf([PageSpec()] * 101))
    doc = mmtok.load(path)
    with pytest.raises(PriceError, match="101 pages: claude-haiku-4-5 takes at most 100 per request"):
        parts("claude-haiku-4-5", doc)  # a 200k-token context window
    assert parts("claude-opus-4-7", doc)["image"].tokens > 0  # 1M tokens: 600 pages
    assert parts("claude-haiku-4-5", doc.select(range(1, 101)))["image"].tokens > 0


def test_size_limits_are_checked_before_counting(letter):
    big = dataclasses.replace(letter, size_bytes=60 * D.MB)
    with pytest.raises(PriceError, match="files must be under 50 MB"):
        parts("gpt-4o", big)
    with pytest.raises(PriceError, match="over the 32 MB request limit"):
        parts("claude-haiku-4-5", dataclasses.replace(letter, size_bytes=25 * D.MB))  # 33.3 MB as base64
    long = dataclasses.replace(letter, pages=letter.pages * 334, texts=letter.texts * 334, file_pages=1002)
    with pytest.raises(PriceError, match=r"1,002 pages: gemini-2\.5-flash takes at most 1,000 per request"):
        parts("gemini-2.5-flash", long)  # 1,000 pages at most


def test_anthropic_refuses_an_encrypted_pdf_that_gemini_reads(letter):
    locked = dataclasses.replace(letter, encrypted=True)
    with pytest.raises(PriceError, match="encrypted: Anthropic takes no encrypted PDFs"):
        parts("claude-haiku-4-5", locked)
    assert "encrypted" in parts("gemini-3.1-pro-preview", locked)["note"]


REPORT = "tests/data/report.pdf"  # two pages written by matplotlib's PDF backend: text, and a landscape chart


def test_a_pdf_from_another_producer_is_priced_through_price(monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[1])
    doc = mmtok.load(REPORT)
    assert [(p.width_pt, p.height_pt) for p in doc.pages] == [(612, 792), (792, 612)]
    gemini = mmtok.price(REPORT, "gemini-3.1-pro-preview")
    assert gemini.tokens("image") == 2 * 560 and gemini.tokens("text") == 0 and gemini.complete
    claude = mmtok.price(doc, "claude-haiku-4-5")
    # 1275x1650 -> 952x1232 (34x44) and 1650x1275 -> 1232x952 (44x34): 1,496 each
    assert claude.tokens("image") == 2 * 1496
    assert claude.tokens("text") == sum(count_text(doc.text(n), "cl100k_base").tokens for n in (1, 2))
    gpt = mmtok.price(doc, "gpt-4o", detail="high")
    assert gpt.tokens("image") == 2 * 765  # 1275x1650 -> 768x993 and 1650x1275 -> 993x768: 2x2 tiles each


def test_price_cli_prices_pdfs_and_reports_broken_limits_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[1])
    long = tmp_path / "long.pdf"
    long.write_bytes(write_pdf([PageSpec()] * 101))
    result = CliRunner().invoke(app, ["price", "--json", "-m", "claude-haiku-4-5", REPORT, str(long)])
    assert result.exit_code == 1
    quote = json.loads(result.output.splitlines()[0])
    assert quote["tokens"] == {"text": quote["tokens"]["text"], "image": 2992} and quote["label"] == "estimate"
    errors = [line for line in result.output.splitlines() if "long.pdf" in line and not line.startswith("{")]
    assert errors == [
        f"error: {long}: 101 pages: claude-haiku-4-5 takes at most 100 per request with a 200,000-token "
        "context window (under 1M tokens)"
    ]
