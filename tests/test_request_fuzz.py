"""Every field of a body of each API replaced by a value of the wrong type: the body is read and priced, or refused
in one line (an MmtokError); never another exception, so a batch goes on."""

from __future__ import annotations

import base64
import copy
import io
from collections.abc import Iterator
from typing import Any

import PIL.Image
import pytest

from mmtok.budgets.pricing import price_request
from mmtok.errors import MmtokError
from mmtok.media.remote import UrlPolicy
from mmtok.request import Policy, parse_body

WRONG = (None, 1, 1.5, True, "s", "", [], {}, [1], ["s"], {"a": 1}, [None])


def _png() -> str:
    out = io.BytesIO()
    PIL.Image.new("RGB", (64, 64)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


B64 = _png()
URL = f"data:image/png;base64,{B64}"
BODIES: dict[str, dict[str, Any]] = {
    "openai-chat": {"model": "gpt-4o", "max_tokens": 5, "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "name": "n", "content": [
            {"type": "text", "text": "t"}, {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64," + B64, "filename": "a.pdf"}}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "r"}]},
    "openai-responses": {"model": "gpt-4o", "instructions": "i", "max_output_tokens": 5, "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "t"}, {"type": "input_image", "image_url": URL, "detail": "high"},
            {"type": "input_file", "file_data": "data:application/pdf;base64," + B64}]},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"},
        {"type": "function_call_output", "call_id": "c", "output": "o"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "x"}]}]},
    "anthropic-messages": {"model": "claude-opus-4-7", "max_tokens": 5, "system": [{"type": "text", "text": "s"}],
        "tools": [{"name": "t", "input_schema": {}}], "tool_choice": {"type": "any"}, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
            {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "d"}]}},
            {"type": "tool_result", "tool_use_id": "x", "content": [{"type": "text", "text": "r"}]}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "n", "input": {}}]}]},
    "gemini-generate": {"systemInstruction": {"parts": [{"text": "s"}]},
        "generationConfig": {"maxOutputTokens": 5, "mediaResolution": "MEDIA_RESOLUTION_LOW"}, "contents": [
        {"role": "user", "parts": [
            {"text": "t"}, {"inlineData": {"mimeType": "image/png", "data": B64},
                            "mediaResolution": {"level": "MEDIA_RESOLUTION_HIGH"}},
            {"functionCall": {"name": "f", "args": {}}}, {"functionResponse": {"name": "f", "response": {}}},
            {"fileData": {"fileUri": "https://generativelanguage.googleapis.com/v1/files/x",
                          "mimeType": "image/png"}}]}]},
    "gemini-interactions": {"model": "gemini-3-flash-preview", "system_instruction": "s",
        "generation_config": {"max_output_tokens": 5}, "input": [
        {"type": "user_input", "content": [
            {"type": "text", "text": "t"}, {"type": "image", "data": B64, "mime_type": "image/png"}]},
        {"role": "model", "content": [{"type": "function_call", "name": "f", "arguments": {}}]}]},
}  # fmt: skip
OFFLINE = Policy(urls=UrlPolicy(read=False))


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    if prefix:
        yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in children:
        yield from _paths(value, (*prefix, key))


def _with(body: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


@pytest.mark.parametrize("api", list(BODIES))
def test_a_field_of_the_wrong_type_is_priced_or_refused_in_one_line(api):
    assert parse_body(BODIES[api]).api == api
    tried = 0
    for path in list(_paths(BODIES[api])):
        for value in WRONG:
            tried += 1
            try:
                request = parse_body(_with(BODIES[api], path, value))
                price_request(request, request.model or "gemini-3-flash-preview", policy=OFFLINE)
            except MmtokError as e:
                assert "\n" not in str(e), (path, value)
    assert tried > 100
