"""Batch files as the official SDKs make them: Anthropic's ``messages.batches.create`` body and google-genai's
``batches.create`` inline body captured through an httpx mock transport (:class:`mmtok.eval.tools.sdk_bodies.Capture`),
and OpenAI's Batch input and Gemini's batch input file built, as their guides show, from bodies the SDKs sent.
``python -m mmtok.eval.tools.sdk_batches`` writes the sample batches under ``mmtok/samples/batches/``; the tests build
theirs with the same helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmtok.eval.tools.sdk_bodies import Capture

ANTHROPIC_BATCH_REPLY = {
    "id": "msgbatch_1", "type": "message_batch", "processing_status": "in_progress",
    "request_counts": {"processing": 1, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
    "created_at": "2026-12-05T00:00:00Z", "expires_at": "2026-12-06T00:00:00Z", "ended_at": None,
    "archived_at": None, "cancel_initiated_at": None, "results_url": None,
}  # fmt: skip
GEMINI_BATCH_REPLY = {"name": "batches/1", "metadata": {"name": "batches/1", "model": "models/gemini-2.5-flash",
                                                        "state": "BATCH_STATE_PENDING"}}  # fmt: skip


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def openai_batch_rows(bodies: list[tuple[str, str, bytes]]) -> list[dict[str, Any]]:
    """OpenAI's Batch input lines (platform.openai.com/docs/guides/batch) around (custom_id, endpoint, body)."""
    return [{"custom_id": cid, "method": "POST", "url": url, "body": json.loads(body)} for cid, url, body in bodies]


def anthropic_batch_body(requests: list[dict[str, Any]]) -> bytes:
    """The body ``client.messages.batches.create(requests=...)`` sends."""
    import anthropic
    import httpx2

    capture = Capture(ANTHROPIC_BATCH_REPLY)
    client = anthropic.Anthropic(api_key="sk-ant-test", http_client=capture.client(httpx2))
    client.messages.batches.create(requests=requests)
    assert capture.path == "/v1/messages/batches"
    return capture.body


def gemini_inline_body(model: str, src: list[Any], name: str = "captions") -> bytes:
    """The body ``client.batches.create(model=..., src=[...])`` sends for inline requests."""
    import httpx
    from google import genai
    from google.genai import types

    capture = Capture(GEMINI_BATCH_REPLY)
    client = genai.Client(api_key="g-test", http_options=types.HttpOptions(httpx_client=capture.client(httpx)))
    client.batches.create(model=model, src=src, config={"display_name": name})
    assert capture.path.endswith(f"{model}:batchGenerateContent")
    return capture.body


def gemini_file_rows(model: str, requests: list[tuple[str, list[Any], Any]]) -> list[dict[str, Any]]:
    """Gemini's batch input file lines (ai.google.dev/gemini-api/docs/batch-api): ``{"key", "request"}``, each
    request the body google-genai sent for ``generate_content`` of (key, contents, config)."""
    from mmtok.eval.tools.sdk_bodies import gemini_generate

    return [{"key": key, "request": json.loads(gemini_generate(model, contents, config)[1])}
            for key, contents, config in requests]  # fmt: skip


def sample_batches() -> dict[str, bytes]:
    """The shipped samples: an OpenAI Batch input of three photo captions, the same as an Anthropic Message Batch,
    and as a Gemini batch input file (photos and a recording)."""
    import base64

    from google.genai import types

    from mmtok.eval.tools.sdk_bodies import openai_chat
    from mmtok.samples import sample_path

    photos = [sample_path(n).read_bytes() for n in ("chelsea.jpg", "rocket_rotated.jpg", "coffee.webp")]
    mimes = ["image/jpeg", "image/jpeg", "image/webp"]
    ask = "Write a one-sentence caption for this photo."
    chat = [(f"photo-{i}", "/v1/chat/completions", openai_chat(model="gpt-4o-mini", max_tokens=60, messages=[
        {"role": "user", "content": [{"type": "text", "text": ask}, {"type": "image_url", "image_url": {
            "url": f"data:{mime};base64,{base64.b64encode(data).decode()}", "detail": "low"}}]}]))
        for i, (data, mime) in enumerate(zip(photos, mimes, strict=True))]  # fmt: skip
    claude = [{"custom_id": f"photo-{i}", "params": {"model": "claude-haiku-4-5", "max_tokens": 60, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": mime,
                                                                   "data": base64.b64encode(data).decode()}},
                                     {"type": "text", "text": ask}]}]}}
        for i, (data, mime) in enumerate(zip(photos, mimes, strict=True))]  # fmt: skip
    config = types.GenerateContentConfig(max_output_tokens=60)
    speech = sample_path("speech.wav").read_bytes()
    gemini = [(f"photo-{i}", [types.Content(role="user", parts=[types.Part(text=ask),
                                                                types.Part.from_bytes(data=data, mime_type=mime)])],
               config) for i, (data, mime) in enumerate(zip(photos[:2], mimes, strict=False))]  # fmt: skip
    gemini.append(("speech-0", [types.Content(role="user", parts=[types.Part(text="Transcribe this."),
                                                                  types.Part.from_bytes(data=speech,
                                                                                        mime_type="audio/wav")])],
                   config))  # fmt: skip
    lines = "".join(json.dumps(row) + "\n" for row in openai_batch_rows(chat)).encode()
    gemini_lines = "".join(json.dumps(r) + "\n" for r in gemini_file_rows("gemini-2.5-flash", gemini)).encode()
    return {"openai.jsonl": lines, "anthropic.json": anthropic_batch_body(claude), "gemini.jsonl": gemini_lines}


def main() -> None:
    folder = Path(__file__).resolve().parents[2] / "mmtok" / "samples" / "batches"
    folder.mkdir(exist_ok=True)
    for name, data in sample_batches().items():
        (folder / name).write_bytes(data)
        print(f"wrote {folder / name} ({len(data):,} bytes)")


if __name__ == "__main__":
    main()
