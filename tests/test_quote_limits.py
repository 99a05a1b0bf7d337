"""`mmtok price`, `models` and `shrink` as users run them on what providers refuse or count otherwise (issue 36):
bad values one line each with the batch going on, provider limits warned with their source and remedy, Gemini 2.x
images counted near every known bill, audio rates shown, a medium whose bytes are a web page refused (issue 37)."""

from __future__ import annotations

import http.server
import json
import threading
from contextlib import contextmanager

from PIL import Image
from typer.testing import CliRunner

from mmtok.budgets.pricing import image_token_count, price
from mmtok.cli.main import app
from tests.sdk_bodies import anthropic_messages, data_url, openai_chat

runner = CliRunner()
AT = ["--at", "2026-12-05"]
HELLO = [{"role": "user", "content": "Hello"}]


def _png(path, size, noise=False):
    import numpy as np

    pixels = np.random.default_rng(0).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8) if noise else None
    image = Image.fromarray(pixels) if noise else Image.new("RGB", size, (200, 120, 40))
    image.save(path, "PNG", compress_level=1)
    return path


def _rows(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# ------------------------------------------------------------------------------------------------ bad values
def test_price_says_each_refused_value_in_one_line_and_the_batch_goes_on(tmp_path):
    bodies = tmp_path / "bodies"
    bodies.mkdir()
    (bodies / "a_string.json").write_bytes(openai_chat(model="gpt-4o", messages=HELLO, max_tokens="100"))
    (bodies / "b_negative.json").write_bytes(openai_chat(model="gpt-4o", messages=HELLO, max_tokens=-3))
    huge = json.dumps({"model": "gpt-4o", "messages": HELLO, "max_tokens": 10**3999})
    (bodies / "c_huge.json").write_text(huge)
    (bodies / "d_n.json").write_bytes(openai_chat(model="gpt-4o", messages=HELLO, max_tokens=10, n=500))
    (bodies / "e_good.json").write_bytes(openai_chat(model="gpt-4o", messages=HELLO, max_tokens=10))
    result = runner.invoke(app, ["price", str(bodies), "--json", *AT])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 4 and all("OpenAI refuses this body with HTTP 400" in e for e in errors)
    assert "max_tokens: must be an integer, got a string ('100')" in errors[0]
    assert "a 4,000-digit integer" in errors[2] and "n: must be at most 128, got 500" in errors[3]
    priced = [r for r in _rows(result) if "total_cost" in r]
    assert [r["item"].rsplit("/", 1)[-1] for r in priced] == ["e_good.json"] and priced[0]["output_tokens"] == 10


def test_price_of_a_body_without_a_limit_shows_the_bound_in_the_table(tmp_path):
    body = tmp_path / "open.json"
    body.write_bytes(openai_chat(model="gpt-4o", messages=HELLO))
    result = runner.invoke(app, ["price", str(body), *AT], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "16,384 ≤" in result.stdout and "maximum output" in result.stdout


# -------------------------------------------------------------------------------------------- provider limits
def test_claude_per_image_limits_are_warned_with_source_and_remedy(tmp_path):
    wide = _png(tmp_path / "wide.png", (8200, 200))
    result = runner.invoke(app, ["price", str(wide), "-m", "claude-sonnet-4-5", "--json", *AT])
    assert result.exit_code == 0
    warning = next(line for line in result.stderr.splitlines() if "8,000 px" in line)
    assert "platform.claude.com/docs/en/build-with-claude/vision" in warning and "mmtok shrink -m claude" in warning
    assert _rows(result)[0]["limits"] == [warning.removeprefix("warning: ")]


def test_more_than_20_images_on_claude_must_each_be_within_2000_px(tmp_path):
    photos = [_png(tmp_path / f"p{n}.png", (2100, 100)) for n in range(21)]
    quote = price(photos, "claude-sonnet-4-5", at="2026-12-05")
    assert len(quote.limits) == 21 and "2,000 px limit per side in a request of more than 20 images" in quote.limits[0]
    assert not price(photos[:20], "claude-sonnet-4-5", at="2026-12-05").limits


def test_an_image_over_5_mb_as_base64_is_refused_by_claude(tmp_path):
    noisy = _png(tmp_path / "noise.png", (1300, 1100), noise=True)  # ~4.3 MB, ~5.7 MB as base64
    quote = price(noisy, "claude-sonnet-4-5", at="2026-12-05")
    assert any("5,242,880-byte limit per image" in said for said in quote.limits)
    assert not price(noisy, "gpt-4o", at="2026-12-05").limits  # OpenAI takes 50 MB a request


def test_openai_takes_at_most_500_images_a_request(tmp_path):
    small = _png(tmp_path / "small.png", (64, 64))
    quote = price([small] * 501, "gpt-4o", detail="low", at="2026-12-05")
    assert quote.limits == (
        "501 images is over the limit of 500 per request (https://developers.openai.com/api/docs/guides/images-vision, "
        "read 2026-12-05): the provider refuses it; send fewer or smaller parts",
    )


def _pictures(count: int, side: int, size_bytes: int) -> list:
    """A request's images as a quote's attachments (name, item), read from no file: the limits see sizes only."""
    from mmtok.media.types import Image as Picture

    return [(f"p{n}.jpg", Picture(None, "jpeg", side, side, size_bytes=size_bytes)) for n in range(count)]


def test_each_providers_request_size_and_image_count_limits_are_said_at_their_documented_figure():
    """Issue 36 item 9: OpenAI's 50 MB of images, Gemini's 100 MB request and 3,000 images, Claude's 600 images and
    32 MB request, each at the figure its page gives (read 2026-12-05), one past it warned, the figure itself not."""
    from mmtok.budgets.pricing.limits import MB, broken_limits

    photos = _pictures(10, 2000, 4 * MB)  # 10 x 4 MB: 53.3 MB as base64
    (openai,) = broken_limits("openai", "gpt-4o", photos)
    assert "53,333,360 bytes as sent, over the 50 MB limit per request" in openai and "images-vision" in openai
    assert not broken_limits("openai", "gpt-4o", photos[:9])  # 48 MB as base64
    (gemini,) = broken_limits("google", "gemini-2.5-flash", photos[:2], request_bytes=100 * MB + 1)
    assert "the request is 100,000,001 bytes, over the 100 MB limit" in gemini and "new-file-limits" in gemini
    assert not broken_limits("google", "gemini-2.5-flash", photos[:2], request_bytes=100 * MB)
    icons = _pictures(3001, 64, 1000)
    assert broken_limits("google", "gemini-2.5-flash", icons) == [
        "3,001 images is over the limit of 3,000 per request (https://blog.google/innovation-and-ai/technology/"
        "developers-tools/gemini-api-new-file-limits, read 2026-12-05): the provider refuses it; send fewer or "
        "smaller parts"
    ]
    assert not broken_limits("google", "gemini-2.5-flash", icons[:3000])
    assert "601 images is over the limit of 600" in broken_limits("anthropic", "claude-sonnet-4-5", icons[:601])[0]
    assert not broken_limits("anthropic", "claude-sonnet-4-5", icons[:600])
    (claude,) = broken_limits("anthropic", "claude-sonnet-4-5", icons[:1], request_bytes=32 * MB + 1)
    assert "the request is 32,000,001 bytes, over the 32 MB limit" in claude and "platform.claude.com" in claude


def test_shrink_never_keeps_an_original_the_provider_refuses(tmp_path):
    from mmtok.budgets.shrink import shrink

    wide = _png(tmp_path / "wide.png", (8200, 300), noise=True)  # noise: no smaller rendition keeps ssim 0.99
    result = shrink(wide, model="claude-sonnet-4-5", keep={"ssim": 0.99}, out=tmp_path / "out")
    assert result.status == "lossless" and "(the model's own view)" in result.action  # was "kept": Claude refuses it
    assert any("8,000 px limit per side" in note for note in result.notes)
    assert max(Image.open(result.path).size) <= 8000


# --------------------------------------------------------------------------------------------- Gemini 2.x images
def test_a_large_photo_on_gemini_2_5_is_counted_as_billed_with_the_pages_bound_in_the_working(tmp_path):
    photo = tmp_path / "photo4000.jpg"
    Image.new("RGB", (4000, 3000), (90, 140, 200)).save(photo, "JPEG")
    result = runner.invoke(app, ["price", str(photo), "-m", "gemini-2.5-flash", "--json", *AT])
    line = next(ln for ln in _rows(result)[0]["lines"] if ln["modality"] == "image")
    assert line["tokens"] == 258 and line["label"] == "estimate"  # was 6,192: 24 tiles, 24x every bill
    assert "2,304" in line["working"] and "6,192, which no bill shows" in line["working"]
    assert image_token_count(4000, 3000, "gemini-2.5-flash", "low").tokens == 64  # the documented levels stay


def test_gemini_2_0_tiles_stop_at_the_documented_3072_px():
    count = image_token_count(4000, 3000, "gemini-2.0-flash")
    assert count.tokens == 12 * 258 and "fit 3072: 3072x2304" in count.working


# ----------------------------------------------------------------------------------------------- audio rates
def test_models_with_modality_audio_shows_the_audio_rates_never_the_text_rate():
    result = runner.invoke(app, ["models", "--provider", "openai", "--modality", "audio"], env={"COLUMNS": "120"})
    assert result.exit_code == 0 and "audio in" in result.stdout and "audio out" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "gpt-4o-audio-preview-2025-06-03" in line)
    assert " 40 " in row and " 80 " in row  # $40 / $80 per 1M audio tokens; the text rates are $2.50 / $10
    rows = _rows(runner.invoke(app, ["models", "--provider", "openai", "--modality", "audio", "--json"]))
    tts = next(r for r in rows if r["model"] == "gpt-4o-mini-tts")
    assert "input_audio" not in tts["prices"] and "input_audio" in tts["no_rate"]  # not the text rate in silence


# ------------------------------------------------------------------------------- a web page served as a medium
class _LyingServer(http.server.BaseHTTPRequestHandler):
    """Serves an HTML page with ``Content-Type: image/png`` (a login wall, a CDN error page)."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        page = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


@contextmanager
def _lying_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LyingServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_html_page_served_as_image_png_is_refused_not_priced_as_a_prompt(tmp_path):
    with _lying_server() as base:
        named = runner.invoke(app, ["price", f"{base}/cat.png", "--json", *AT])
        messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{base}/cat.png"}}]}]
        body = tmp_path / "body.json"
        body.write_bytes(openai_chat(model="gpt-4o", messages=messages, max_tokens=10))
        inside = runner.invoke(app, ["price", str(body), "--allow-private", "--json", *AT])
    assert named.exit_code == 1 and not _rows(named)
    error = next(line for line in named.stderr.splitlines() if line.startswith("error:"))
    assert f"{base}/cat.png" in error and "served as image/png, but its bytes are not that" in error
    assert "like an HTML page" in error
    assert inside.exit_code == 1 and "like an HTML page" in inside.stderr


def test_a_part_that_declares_a_pdf_but_holds_text_is_left_out_not_priced_as_a_prompt():
    from mmtok.budgets.pricing import price_request

    part = {"type": "file", "file": {"file_data": data_url(b"just some words", "application/pdf"), "filename": "a"}}
    body = openai_chat(model="gpt-4o", messages=[{"role": "user", "content": [part]}], max_tokens=10)
    quote = price_request(body, at="2026-12-05")
    assert not quote.complete and all(line.item != "messages[0].content[0]" for line in quote.lines)
    assert "declared application/pdf, but its bytes are not that (they start like text)" in quote.missing[0]


def test_a_body_on_claude_with_a_cache_mark_prints_the_read_price_beside(tmp_path):
    system = [{"type": "text", "text": "Style guide. " * 700, "cache_control": {"type": "ephemeral"}}]
    body = tmp_path / "cached.json"
    body.write_bytes(anthropic_messages(model="claude-sonnet-4-5", max_tokens=50, system=system, messages=HELLO))
    result = runner.invoke(app, ["price", str(body), *AT], env={"COLUMNS": "200"})
    assert (
        result.exit_code == 0 and "prompt cache:" in result.stdout and "a repeat within the lifetime" in result.stdout
    )
