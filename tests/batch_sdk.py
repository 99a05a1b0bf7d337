"""Batch files as the official SDKs and the providers' documented examples make them, with a photo, a recording and
a PDF in their requests: OpenAI's Batch input built from bodies the ``openai`` SDK sent, Anthropic's
``messages.batches.create`` body and google-genai's ``batches.create`` inline body captured through an httpx mock
transport, and Gemini's input file of ``{"key", "request"}`` lines built from bodies google-genai sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmtok.eval.tools import sdk_batches
from mmtok.eval.tools.sdk_batches import gemini_file_rows, openai_batch_rows, write_jsonl
from mmtok.samples import sample_path
from tests.sdk_bodies import as_json, b64, data_url, openai_chat, openai_responses

PHOTO = sample_path("chelsea.jpg").read_bytes()
SPEECH = sample_path("speech.wav").read_bytes()
REPORT = (Path(__file__).parent / "data" / "report.pdf").read_bytes()
QUESTION = "Describe what you are given in one sentence."


# ------------------------------------------------------------------------------------------------------ OpenAI
def openai_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    """(custom_id, endpoint, body) of requests the openai SDK sent: a photo, a recording, a PDF, a Responses body."""
    photo = openai_chat(model="gpt-4o", max_tokens=200, messages=[{"role": "user", "content": [
        {"type": "text", "text": QUESTION},
        {"type": "image_url", "image_url": {"url": data_url(PHOTO, "image/jpeg"), "detail": "high"}}]}])  # fmt: skip
    audio = openai_chat(model="gpt-4o-audio-preview", max_tokens=100, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Transcribe this."},
        {"type": "input_audio", "input_audio": {"data": b64(SPEECH), "format": "wav"}}]}])  # fmt: skip
    pdf = openai_chat(model="gpt-4o", max_tokens=300, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Summarise this report."},
        {"type": "file", "file": {"filename": "report.pdf",
                                  "file_data": data_url(REPORT, "application/pdf")}}]}])  # fmt: skip
    responses = openai_responses(model="gpt-4.1-mini", max_output_tokens=50, input=[{"role": "user", "content": [
        {"type": "input_text", "text": QUESTION},
        {"type": "input_image", "image_url": data_url(PHOTO, "image/jpeg"), "detail": "low"}]}])  # fmt: skip
    chat = "/v1/chat/completions"
    return [("photo-1", chat, as_json(photo)), ("audio-1", chat, as_json(audio)), ("pdf-1", chat, as_json(pdf)),
            ("resp-1", "/v1/responses", as_json(responses))]  # fmt: skip


def openai_batch(path: Path, bodies: list[tuple[str, str, dict[str, Any]]] | None = None) -> Path:
    """OpenAI's Batch input format (platform.openai.com/docs/guides/batch): one request per line."""
    found = bodies or openai_bodies()
    return write_jsonl(path, openai_batch_rows([(cid, url, json.dumps(body).encode()) for cid, url, body in found]))


# --------------------------------------------------------------------------------------------------- Anthropic
def anthropic_requests() -> list[dict[str, Any]]:
    def image(data: bytes, mime: str, kind: str = "image") -> dict[str, Any]:
        return {"type": kind, "source": {"type": "base64", "media_type": mime, "data": b64(data)}}

    return [
        {"custom_id": "photo-1", "params": {"model": "claude-sonnet-4-5", "max_tokens": 200, "messages": [
            {"role": "user", "content": [image(PHOTO, "image/jpeg"), {"type": "text", "text": QUESTION}]}]}},
        {"custom_id": "pdf-1", "params": {"model": "claude-sonnet-4-5", "max_tokens": 300, "messages": [
            {"role": "user", "content": [image(REPORT, "application/pdf", "document"),
                                         {"type": "text", "text": "Summarise this report."}]}]}},
        {"custom_id": "text-1", "params": {"model": "claude-haiku-4-5", "max_tokens": 50,
                                           "messages": [{"role": "user", "content": "Say hello."}]}},
    ]  # fmt: skip


def anthropic_batch_body(requests: list[dict[str, Any]] | None = None) -> bytes:
    """The body ``client.messages.batches.create`` sends."""
    return sdk_batches.anthropic_batch_body(requests or anthropic_requests())


# ------------------------------------------------------------------------------------------------------ Gemini
def gemini_contents() -> list[tuple[str, list[Any]]]:
    from google.genai import types

    def content(text: str, data: bytes, mime: str) -> list[Any]:
        parts = [types.Part(text=text), types.Part.from_bytes(data=data, mime_type=mime)]
        return [types.Content(role="user", parts=parts)]

    return [("photo-1", content(QUESTION, PHOTO, "image/jpeg")),
            ("audio-1", content("Transcribe.", SPEECH, "audio/wav")),
            ("pdf-1", content("Summarise this report.", REPORT, "application/pdf"))]  # fmt: skip


def gemini_batch_file(path: Path, model: str = "gemini-2.5-flash") -> Path:
    """Gemini's batch input file (ai.google.dev/gemini-api/docs/batch-api): a GenerateContentRequest per line, each
    the body google-genai sent for ``generate_content``."""
    from google.genai import types

    config = types.GenerateContentConfig(max_output_tokens=200)
    return write_jsonl(path, gemini_file_rows(model, [(key, contents, config) for key, contents in gemini_contents()]))


def gemini_inline_body(model: str = "gemini-2.5-flash") -> bytes:
    """The body ``client.batches.create(src=[...])`` sends for inline requests."""
    src = [{"contents": contents, "config": {"max_output_tokens": 200}} for _, contents in gemini_contents()]
    return sdk_batches.gemini_inline_body(model, src)
