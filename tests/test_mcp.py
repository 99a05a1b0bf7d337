"""`mmtok mcp` driven by the MCP SDK's own client: the server runs as a subprocess (`mmtok mcp`) over stdio, or over
streamable HTTP on 127.0.0.1; every call is bounded in time. Legacy (initialize handshake) and 2026-07-28 sessions
are both used, since clients speak either."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ListRootsResult, Root
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.cli.mcp_server import MAX_ARGUMENT_CHARS
from tests.sdk_bodies import data_url, image_bytes, openai_chat

CALL_S = 60  # one session's whole conversation
FAST = ["ssim>=0.9"]  # no OCR
TOOLS = {"price", "shrink", "inspect", "models"}
pytestmark = pytest.mark.timeout(180)


def _command() -> list[str]:
    script = Path(sys.executable).with_name("mmtok")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mmtok.cli.main"]


@pytest.fixture
def folder(tmp_path, samples) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(samples / "astronaut.png", root / "astronaut.png")
    shutil.copy(samples / "chelsea.jpg", root / "chelsea.jpg")
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(12))  # a PNG cut short
    return root


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The server's environment: this one, with a cache and a (missing) settings folder of the test's own."""
    names = ("MMTOK_CONFIG", "MMTOK_MODEL", "MMTOK_KEEP", "MMTOK_ROOTS")
    return {k: v for k, v in os.environ.items() if k not in names} | {
        "MMTOK_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }


def _granting(*folders: Path):
    async def roots(_context: object) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=f.as_uri(), name=f.name) for f in folders])

    return roots


@contextlib.asynccontextmanager
async def _session(env: dict[str, str], *args: str, grant: tuple[Path, ...] = (), mode: str = "auto") -> AsyncIterator:
    params = StdioServerParameters(command=_command()[0], args=[*_command()[1:], "mcp", *args], env=env)
    callback = _granting(*grant) if grant else None
    async with Client(params, list_roots_callback=callback, mode=mode, read_timeout_seconds=CALL_S) as client:
        yield client


def _run(scenario) -> None:
    async def bounded() -> None:
        with anyio.fail_after(CALL_S * 2):
            await scenario()

    anyio.run(bounded)


def _error(result) -> str:
    assert result.is_error, result.content
    (block,) = result.content
    assert block.type == "text" and "\n" not in block.text, block.text
    return block.text


def test_tools_listed_and_called_with_good_and_bad_arguments(folder, env):
    async def scenario() -> None:
        async with _session(env, grant=(folder,), mode="legacy") as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(listed) == TOOLS
            assert {"paths", "urls", "body", "models"} <= set(listed["price"].input_schema["properties"])
            assert "granted" not in listed["price"].input_schema["properties"]  # filled by the server, not the model
            shrink_data = listed["shrink"].input_schema["properties"]["data"]
            assert f"{MAX_ARGUMENT_CHARS:,}" in shrink_data["description"]  # the stated cap

            priced = await client.call_tool(
                "price", {"paths": ["astronaut.png"], "models": ["gpt-4o", "claude-opus-4-7"]}
            )
            quotes = priced.structured_content["quotes"]
            for quote, model in zip(quotes, ("gpt-4o", "claude-opus-4-7"), strict=True):
                assert quote["tokens"] == mmtok.price(folder / "astronaut.png", model).to_dict()["tokens"]
            assert not priced.is_error and priced.structured_content["errors"] == []

            inspected = await client.call_tool("inspect", {"paths": [str(folder / "chelsea.jpg")]})
            (info,) = inspected.structured_content["items"]
            assert (info["kind"], info["width"], info["height"]) == ("image", 451, 300)

            listed_models = await client.call_tool("models", {"provider": "anthropic", "modality": "image"})
            names = [row["model"] for row in listed_models.structured_content["models"]]
            assert "claude-opus-4-7" in names and all(n.startswith("claude") for n in names)
            lines = listed_models.content[0].text.splitlines()  # what a model reads: a line per model, not the JSON
            assert [line.split(" (")[0] for line in lines] == names

            assert _error(await client.call_tool("price", {"paths": 5})) == (
                "Error executing tool price: paths: Input should be a valid list"
            )
            said = _error(await client.call_tool("price", {"paths": ["broken.png"], "models": ["gpt-4o"]}))
            assert said.startswith(f"Error executing tool price: {folder / 'broken.png'}: ")
            said = _error(await client.call_tool("price", {"paths": ["astronaut.png"], "models": ["no-such-model"]}))
            assert "no-such-model" in said
            said = _error(await client.call_tool("shrink", {"path": "astronaut.png", "keep": ["ssim>=2"]}))
            assert "ssim is a fraction between 0 and 1" in said
            assert "give one of path or data" in _error(await client.call_tool("shrink", {}))
            assert "no models match" in _error(await client.call_tool("models", {"contains": "no-such"}))
            assert "detail" in _error(await client.call_tool("price", {"paths": ["a.png"], "detail": "huge"}))

            mixed = await client.call_tool("price", {"paths": ["astronaut.png", "missing.png"]})  # a batch goes on
            assert not mixed.is_error and len(mixed.structured_content["quotes"]) == 1
            assert "missing.png: no such file" in mixed.structured_content["errors"][0]["error"]

    _run(scenario)


def test_a_request_body_made_by_the_openai_sdk_is_priced_on_its_own_model_or_the_ones_asked(folder, env, samples):
    photo = image_bytes(samples / "chelsea.jpg", (1024, 1024))
    body = json.loads(
        openai_chat(
            model="gpt-4o",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this photo?"},
                        {"type": "image_url", "image_url": {"url": data_url(photo, "image/jpeg"), "detail": "high"}},
                    ],
                }
            ],
        )
    )
    expected = mmtok.price_request(body).to_dict()

    async def scenario() -> None:
        async with _session(env) as client:
            own = (await client.call_tool("price", {"body": body})).structured_content["quotes"]
            assert [q["model"] for q in own] == ["gpt-4o"]
            assert own[0]["tokens"] == expected["tokens"] and own[0]["tokens"]["image"] == 765
            assert own[0]["total_cost"] == expected["total_cost"]
            both = await client.call_tool("price", {"body": body, "models": ["gpt-4o", "claude-opus-4-7"]})
            assert [q["model"] for q in both.structured_content["quotes"]] == ["gpt-4o", "claude-opus-4-7"]
            said = _error(await client.call_tool("price", {"body": {"hello": "world"}}))
            assert said.startswith("Error executing tool price: body: ")

    _run(scenario)


def test_shrink_returns_the_image_mmtok_shrink_writes_and_its_quote_is_mmtok_prices(folder, env, tmp_path):
    async def scenario() -> dict:
        async with _session(env, "--root", str(folder)) as client:
            done = await client.call_tool("shrink", {"path": "chelsea.jpg", "model": "gpt-4o", "keep": FAST})
            assert not done.is_error, done.content
            image, text = done.content
            assert image.type == "image" and text.type == "text"
            return {"data": image.data, "mime": image.mime_type, "result": done.structured_content}

    got: dict = {}

    async def keep() -> None:
        got.update(await scenario())

    _run(keep)
    result = got["result"]
    assert result["status"] == "shrunk" and result["tokens_after"] < result["tokens_before"]
    assert result["measures"]["ssim"] >= 0.9 and result["bars"] == {"ssim": "ssim>=0.9"}
    out = tmp_path / "cli"
    cli = CliRunner().invoke(
        app, ["shrink", str(folder / "chelsea.jpg"), "-m", "gpt-4o", "--keep", FAST[0], "--out", str(out), "--json"]
    )
    assert cli.exit_code == 0, cli.output
    (written,) = out.iterdir()
    assert base64.b64decode(got["data"]) == written.read_bytes()
    assert got["mime"] == {".png": "image/png", ".jpg": "image/jpeg", ".webp": "image/webp"}[written.suffix]
    detail = ["--detail", result["detail"]] if result["detail"] else []
    priced = CliRunner().invoke(app, ["price", str(written), "-m", "gpt-4o", *detail, "--json"])
    (quote,) = [json.loads(line) for line in priced.stdout.splitlines()]
    assert quote["tokens"]["image"] == result["tokens_after"]
    assert quote["total_cost"] == result["cost_after"]


def test_refusals_are_tool_errors_and_the_server_keeps_serving(folder, env, tmp_path):
    outside = tmp_path / "outside.png"
    shutil.copy(folder / "astronaut.png", outside)
    (folder / "link.png").symlink_to(outside)
    big = "A" * (100 * 1024 * 1024)  # 100 MiB of base64

    async def scenario() -> None:
        async with _session(env, "--root", str(folder)) as client:
            said = _error(await client.call_tool("shrink", {"data": big, "model": "gpt-4o"}))
            assert f"data: {len(big):,} characters; this server takes at most {MAX_ARGUMENT_CHARS:,}" in said
            image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + big[:MAX_ARGUMENT_CHARS]}}
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [image]}]}
            assert "body: " in _error(await client.call_tool("price", {"body": body}))
            assert "data: not base64" in _error(await client.call_tool("shrink", {"data": "not*base64"}))
            for path in (str(outside), "../outside.png", "link.png", outside.as_uri()):
                said = _error(await client.call_tool("price", {"paths": [path]}))
                assert "outside the folders open to this server" in said, path
            for url in ("http://127.0.0.1:9/a.png", "http://169.254.169.254/latest/meta-data", "http://[::1]/a.png"):
                said = _error(await client.call_tool("price", {"urls": [url]}))
                assert "loopback, private or link-local address: not read" in said, url
            said = _error(await client.call_tool("inspect", {"urls": ["http://10.0.0.1/a.png"]}))
            assert "private" in said
            good = await client.call_tool("price", {"paths": ["astronaut.png"], "models": ["gpt-4o"]})
            assert not good.is_error and good.structured_content["quotes"][0]["tokens"] == {"image": 255}
            small = base64.b64encode((folder / "astronaut.png").read_bytes()).decode()
            shrunk = await client.call_tool("shrink", {"data": small, "model": "gpt-4o", "keep": FAST})
            assert not shrunk.is_error and shrunk.content[0].type == "image"

    _run(scenario)


def test_without_roots_no_path_is_read_and_granted_roots_open_their_folders(folder, env):
    """Roots are asked for on each call: by a roots/list request (legacy sessions, the first test) or, in a
    2026-07-28 session, through an input-required round the client answers and retries."""
    path = str(folder / "astronaut.png")

    async def scenario() -> None:
        async with _session(env) as client:
            said = _error(await client.call_tool("inspect", {"paths": [path]}))
            assert "no folder is open to this server: start it with --root DIR, or grant roots" in said
        async with _session(env, grant=(folder,)) as client:
            assert client.protocol_version == "2026-07-28"
            inspected = await client.call_tool("inspect", {"paths": [path]})
            assert inspected.structured_content["items"][0]["width"] == 384
            assert "outside" in _error(await client.call_tool("inspect", {"paths": [str(folder.parent / "x.png")]}))

    _run(scenario)


def test_the_settings_file_gives_the_default_model_bars_and_roots(folder, env, tmp_path):
    settings = tmp_path / "mmtok.toml"
    settings.write_text(f'model = "claude-opus-4-7"\nkeep = ["ssim>=0.9"]\nroots = ["{folder}"]\n')

    async def scenario() -> None:
        async with _session(env | {"MMTOK_CONFIG": str(settings)}) as client:
            priced = await client.call_tool("price", {"paths": ["astronaut.png"]})
            assert [q["model"] for q in priced.structured_content["quotes"]] == ["claude-opus-4-7"]
            done = await client.call_tool("shrink", {"path": "astronaut.png"})
            assert done.structured_content["model"] == "claude-opus-4-7"
            assert done.structured_content["bars"] == {"ssim": "ssim>=0.9"}

    _run(scenario)


@contextlib.contextmanager
def _file_server(folder: Path) -> Iterator[str]:
    """A static file server on 127.0.0.1 that answers Range requests (206), as the servers mmtok reads URLs from."""

    class Ranged(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = (folder / self.path.lstrip("/")).read_bytes()
            first, last = 0, len(data) - 1
            asked = self.headers.get("Range", "")
            if asked.startswith("bytes="):
                start, _, end = asked[6:].partition("-")
                first, last = int(start), min(int(end or last), last)
            self.send_response(206 if asked else 200)
            self.send_header("Content-Type", "image/png" if self.path.endswith(".png") else "image/jpeg")
            self.send_header("Content-Length", str(last - first + 1))
            if asked:
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
            self.end_headers()
            self.wfile.write(data[first : last + 1])

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ranged)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_urls_to_this_machine_are_read_only_when_the_server_allows_private_addresses(folder, env):
    async def scenario(base: str) -> None:
        async with _session(env, "--allow-private") as client:
            priced = await client.call_tool("price", {"urls": [f"{base}/astronaut.png"], "models": ["gpt-4o"]})
            assert not priced.is_error, priced.content
            (quote,) = priced.structured_content["quotes"]
            assert quote["item"] == f"{base}/astronaut.png" and quote["tokens"] == {"image": 255}
            inspected = await client.call_tool("inspect", {"urls": [f"{base}/chelsea.jpg"]})
            assert inspected.structured_content["items"][0]["width"] == 451

    with _file_server(folder) as base:
        _run(lambda: scenario(base))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_on_the_loopback_interface(folder, env):
    port = _free_port()
    command = [*_command(), "mcp", "--http", "--port", str(port), "--root", str(folder)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + CALL_S
        while time.monotonic() < deadline and server.poll() is None:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)

        async def scenario() -> None:
            async with Client(url, read_timeout_seconds=CALL_S) as client:
                assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
                priced = await client.call_tool("price", {"paths": ["astronaut.png"]})
                assert priced.structured_content["quotes"][0]["tokens"] == {"image": 255}

        _run(scenario)
    finally:
        server.terminate()
        server.wait(10)
        server.stderr.close()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--root", "/no/such/folder"], "--root /no/such/folder: not a folder"),
        (["--keep", "ssim>=2"], "ssim is a fraction between 0 and 1"),
    ],
)
def test_bad_start_options_are_usage_errors(args, said, env, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["mcp", *args])
    assert result.exit_code == 2 and said in result.stderr


def test_data_kept_as_it_is_comes_back_with_the_mime_type_of_its_bytes_and_odd_paths_are_one_line(folder, env):
    """Data has no file name: the block's MIME type comes from its bytes (it was `image/` when the result was the
    input as is). A path with a NUL byte or a 5,000-character name is a clear refusal, not an unexpected error."""
    small = base64.b64encode((folder / "astronaut.png").read_bytes()).decode()

    async def scenario() -> None:
        async with _session(env, "--root", str(folder)) as client:
            kept = await client.call_tool(
                "shrink", {"data": small, "model": "claude-opus-4-7", "keep": ["ssim>=0.99999"]}
            )
            assert not kept.is_error and kept.structured_content["status"] == "kept"
            image = kept.content[0]
            assert image.type == "image" and image.mime_type == "image/png"
            assert base64.b64decode(image.data) == (folder / "astronaut.png").read_bytes()
            for path, says in (
                ("a\x00b.png", "has a NUL byte"),
                ("x" * 5000 + ".png", "cannot be read: File name too long"),
            ):
                for tool, arguments in (("shrink", {"path": path}), ("price", {"paths": [path]})):
                    said = _error(await client.call_tool(tool, arguments))
                    assert says in said and "unexpected" not in said and len(said) < 400, said

    _run(scenario)


def test_an_audio_block_is_typed_by_its_bytes_not_its_name(samples, tmp_path):
    from mmtok.cli.mcp_tools import _media_block

    unnamed = tmp_path / "0123abcd"  # as data given to the server is stored: a hash, no suffix
    shutil.copy(samples / "speech.wav", unnamed)
    (block,) = _media_block(unnamed, "audio")
    assert block.type == "audio" and block.mime_type == "audio/wav"
    shutil.copy(samples / "chelsea.jpg", unnamed)
    (block,) = _media_block(unnamed, "image")
    assert block.type == "image" and block.mime_type == "image/jpeg"
