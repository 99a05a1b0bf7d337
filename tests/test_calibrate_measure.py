"""Active measuring: photos counted on each provider's free counting endpoint (here the loopback upstream, which
also adds 7 tokens per Claude request the documented rule does not have), then fitted like billed calls."""

from __future__ import annotations

import json
import tomllib

import pytest
from typer.testing import CliRunner

from mmtok.budgets.calibrate import calibrate
from mmtok.budgets.calibrate.measure import measure
from mmtok.budgets.ledger import open_ledger
from mmtok.cli.main import app
from mmtok.errors import ConfigError
from tests.upstream import Upstream, make_app, serve

SIZES = "512x512,800x600,1000x1000,1092x1092,1400x900,1600x1200,1920x1080,2000x1500,600x1800"
KEYS = {"OPENAI_API_KEY": "sk-test-measure", "ANTHROPIC_API_KEY": "ak-test-measure", "GEMINI_API_KEY": "gk-test"}


@pytest.fixture
def upstream():
    state = Upstream()
    state.overheads["anthropic"] = (0, 7)  # 7 tokens per request beyond what mmtok predicts
    with serve(make_app(state)) as url:
        yield state, url


def test_calibrate_measures_on_the_counting_endpoints_then_fits(upstream, tmp_path, monkeypatch):
    state, url = upstream
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    ledger, sheet = tmp_path / "calls.sqlite", tmp_path / "measured.toml"
    args = ["calibrate", str(ledger), "--out", str(sheet), "--sizes", SIZES, "--measure", "claude-sonnet-4-5",
            "--measure", "gemini-2.5-pro", "--measure", "gpt-4.1-mini", "--openai-upstream", url + "/v1",
            "--anthropic-upstream", url, "--gemini-upstream", url, "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    paths = {r["path"] for r in state.requests}
    assert paths == {"/v1/messages/count_tokens", "/v1beta/models/gemini-2.5-pro:countTokens",
                     "/v1/responses/input_tokens"}  # fmt: skip
    assert {r["headers"].get("x-api-key") for r in state.requests} >= {KEYS["ANTHROPIC_API_KEY"]}
    stored = ledger.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("calls.sqlite-*"))
    assert not any(key.encode() in stored for key in KEYS.values())
    fits = {m.model: m for m in calibrate(open_ledger(ledger).records()).models}
    claude = fits["claude-sonnet-4-5"]
    assert (claude.overhead.per_request, claude.overhead.exact) == (7, True) and claude.fitted.all_exact
    assert dict((k, b) for k, _, b in claude.changed) == {"max_tokens": 1200}
    gemini = fits["gemini-2.5-pro"]  # mmtok counts Gemini 2.5's default images as billed, 258 (issue 36)
    assert gemini.documented.all_exact and not gemini.changed
    assert dict((k, b) for k, _, b in fits["gpt-4.1-mini"].changed) == {"levels.high.patch_budget": 1536}
    assert len(tomllib.loads(sheet.read_text())["family"]) == 2
    reported = {m["model"]: m for m in json.loads(result.stdout)["models"]}
    assert reported["claude-sonnet-4-5"]["overhead"]["per_request"] == 7


def test_measuring_needs_the_providers_key(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        measure("claude-sonnet-4-5", open_ledger(tmp_path / "calls.sqlite"), [(512, 512)])
