"""PDF parts in API request bodies made by the official SDKs, priced by each provider's document rule."""

from __future__ import annotations

from pathlib import Path

from mmtok.budgets.pricing import price_request
from tests.sdk_bodies import anthropic_messages, b64, data_url, gemini_generate, openai_chat

REPORT = (Path(__file__).parent / "data" / "report.pdf").read_bytes()  # two pages, by matplotlib
AT = "2026-12-01"


def _document_lines(quote, where: str) -> dict[str, object]:
    return {ln.modality: ln for ln in quote.lines if ln.item == where}


def test_an_anthropic_document_block_is_priced_as_text_plus_page_images():
    body = anthropic_messages(
        model="claude-haiku-4-5",
        max_tokens=256,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(REPORT)},
                    },
                    {"type": "text", "text": "Summarise the report."},
                ],
            }
        ],
    )
    quote = price_request(body, at=AT)
    lines = _document_lines(quote, "messages[0].content[0]")
    assert lines["image"].tokens == 2 * 1496 and lines["image"].label == "estimate"
    assert lines["text"].tokens > 0 and "pdf-support" in lines["image"].working
    assert quote.complete


def test_an_openai_file_part_is_priced_at_low_detail_before_gpt_5_6():
    body = openai_chat(
        model="gpt-4o",
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {"filename": "report.pdf", "file_data": data_url(REPORT, "application/pdf")},
                    },
                    {"type": "text", "text": "What does the chart show?"},
                ],
            }
        ],
    )
    lines = _document_lines(price_request(body, at=AT), "messages[0].content[0]")
    assert lines["image"].tokens == 2 * 85 and lines["text"].tokens > 0


def test_a_gemini_pdf_part_takes_its_own_media_resolution():
    from google.genai import types

    _, body = gemini_generate(
        "gemini-3-flash-preview",
        [
            types.Content(
                role="user",
                parts=[
                    types.Part.from_bytes(
                        data=REPORT,
                        mime_type="application/pdf",
                        media_resolution=types.PartMediaResolutionLevel.MEDIA_RESOLUTION_LOW,
                    ),
                    types.Part(text="Summarise."),
                ],
            )
        ],
    )
    quote = price_request(body, "gemini-3-flash-preview", at=AT)
    lines = _document_lines(quote, "contents[0].parts[0]")
    assert lines["image"].tokens == 2 * 280 and "text" not in lines  # native text is not billed


def test_a_model_without_a_pdf_rule_leaves_the_part_out_in_one_line():
    pdf = {"type": "file", "file": {"file_data": data_url(REPORT, "application/pdf")}}
    body = openai_chat(
        model="grok-4",
        messages=[{"role": "user", "content": [pdf, {"type": "text", "text": "Sum up."}]}],
        max_tokens=100,
    )
    quote = price_request(body, at=AT)
    assert not quote.complete and quote.tokens("text") > 0
    assert quote.missing == (
        "messages[0].content[0]: grok-4 has no published PDF rule (mmtok prices PDFs on Anthropic, OpenAI, Gemini and "
        "self-hosted models): send the pages as images instead (mmtok shrink renders them)",
    )
