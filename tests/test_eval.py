"""Metrics (Fréchet distance vs the closed form, PSNR/SSIM, WER/CER, ASR backends, feature extractors), judges
(HTTP against a real loopback server; the local LM) and the batch runner (resume after SIGKILL, workers, errors)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import ConfigError, EvalError
from mmtok.eval.asr import PocketsphinxASR, WhisperASR, cer, wer
from mmtok.eval.judge import HTTPJudge, get_judge, parse_score
from mmtok.eval.metrics import feature_frechet, frechet_distance, psnr, ssim
from mmtok.eval.runner import read_results, run
from mmtok.eval.suite import load_suite
from mmtok.samples import manifest


# ------------------------------------------------------------------------------------------------- metrics
def test_frechet_distance_matches_the_closed_form():
    rng = np.random.default_rng(0)
    mu1, mu2 = rng.normal(size=4), rng.normal(size=4)
    a, b = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
    s1, s2 = a @ a.T + np.eye(4), b @ b.T + np.eye(4)
    from scipy.linalg import sqrtm

    expected = float(np.sum((mu1 - mu2) ** 2) + np.trace(s1 + s2 - 2 * sqrtm(s1 @ s2).real))
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-9)
    # for commuting (diagonal) covariances: sum (sqrt(a) - sqrt(b))^2
    d1, d2 = np.diag([1.0, 4.0, 9.0]), np.diag([4.0, 4.0, 1.0])
    assert frechet_distance(np.zeros(3), d1, np.zeros(3), d2) == pytest.approx(1 + 0 + 4)


def test_frechet_from_samples_approaches_the_population_value():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, 3, generator=g)
    y = torch.randn(20000, 3, generator=g) * 2 + torch.tensor([1.0, 0.0, 0.0])
    assert feature_frechet(x, y) == pytest.approx(1 + 3 * (2 - 1) ** 2, rel=0.05)
    assert feature_frechet(x, x) == pytest.approx(0, abs=1e-6)


def test_psnr_and_ssim():
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    noisy = (x + 0.1 * torch.randn_like(x)).clamp(-1, 1)
    assert ssim(x, x) == pytest.approx(1.0, abs=1e-6)
    assert 15 < psnr(noisy, x) < 40 and ssim(noisy, x) < 1


def test_wer_and_cer_on_normalised_text():
    assert wer(["Hello, world! It's fine."], ["hello world it is fine"]) == 0.0
    assert wer(["the cat sat"], ["the cat sat down"]) == pytest.approx(1 / 3)
    assert cer(["abc"], ["abd"]) == pytest.approx(1 / 3)
    assert wer(["two words"], [""]) == 1.0  # an empty hypothesis is all deletions, not an error


def test_whisper_and_pocketsphinx_transcribe_the_sample_speech(samples):
    reference = manifest()["speech.wav"]["transcript"]
    text = WhisperASR().transcribe(samples / "speech.wav")
    assert wer([reference], [text]) < 0.5
    assert isinstance(PocketsphinxASR().transcribe(samples / "speech.wav"), str)


def test_efficientnet_features_are_imagenet_features(samples):
    from mmtok.eval.extractors import get_extractor

    extractor = get_extractor("efficientnet-lite0")
    cat = mmtok.load(samples / "chelsea.jpg").to_tensor()[None]
    feats = extractor.features(cat)
    assert feats.shape == (1, 1280) and extractor.metric == "FD-efficientnet-lite0"
    logits = extractor.model.forward_head(
        extractor.model.forward_features(
            (
                torch.nn.functional.interpolate(cat.float() / 255, size=(224, 224), mode="bilinear", antialias=True)
                - extractor.mean
            )
            / extractor.std
        )
    )
    assert int(logits.argmax()) in (281, 282, 285)  # tabby / tiger / Egyptian cat


def test_real_fid_explains_when_its_weights_are_missing(monkeypatch):
    from mmtok.eval.extractors import InceptionV3

    monkeypatch.delenv("MMTOK_INCEPTION_WEIGHTS", raising=False)
    with pytest.raises(EvalError, match="FID"):
        InceptionV3()


# ------------------------------------------------------------------------------------------------- judges
class _ChatServer:
    """A real HTTP server on loopback that answers chat completions from a script of replies."""

    def __init__(self, replies: list[tuple[int, str]]) -> None:
        self.replies = list(replies)
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.requests += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                status, text = outer.replies.pop(0) if outer.replies else (200, "5")
                body = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_http_judge_scores_retries_caches_and_flags_unparseable(tmp_path):
    server = _ChatServer([(500, "busy"), (200, "Score: 4"), (200, "I cannot grade this.")])
    try:
        judge = HTTPJudge(server.url, "test-model", backoff_s=0.01, cache_dir=tmp_path)
        first = judge.score("the digit seven", "seven", "which digit?")
        assert (first.score, first.status, server.requests) == (4.0, "ok", 2)  # one retry after the 500
        again = judge.score("the digit seven", "seven", "which digit?")
        assert again.score == 4.0 and server.requests == 2  # from the cache
        odd = judge.score("no idea", "seven", "which digit?")
        assert odd.score is None and odd.status == "unparseable" and odd.raw == "I cannot grade this."
    finally:
        server.close()


def test_unreachable_judge_is_a_clear_error(tmp_path):
    judge = HTTPJudge("http://127.0.0.1:9/v1", "m", retries=1, backoff_s=0.01, timeout_s=1, cache_dir=tmp_path)
    with pytest.raises(EvalError, match="unreachable after 2 attempts"):
        judge.score("a", "b")


def test_score_parsing_and_judge_specs():
    assert parse_score("Score: 5") == 5 and parse_score("3.0") == 3 and parse_score("ten") is None
    assert parse_score("I'd give it 7") is None
    with pytest.raises(EvalError, match="http judge needs"):
        get_judge({"kind": "http"})
    with pytest.raises(EvalError, match="unknown judge"):
        get_judge("oracle")


@pytest.mark.timeout(600)
def test_local_judge_returns_an_expected_score():
    result = get_judge("local").score("the digit seven", "seven", "which digit is written?")
    assert 1.0 <= result.score <= 5.0 and result.raw.startswith("p(1..5)")


# ------------------------------------------------------------------------------------------------- runner
def write_suite(tmp_path, body: str, name: str = "suite.toml"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_image_suite_run_resume_and_report(tmp_path):
    suite = write_suite(
        tmp_path,
        """
name = "tiny-images"
[dataset]
kind = "images"
source = "builtin:heldout-photos"
limit = 6
[pipeline]
tokenizer = "vq-clip-tiny"
image_size = 64
[metrics]
names = ["psnr", "ssim", "fd"]
fd_extractor = "clip-tiny"
""",
    )
    out = tmp_path / "run"
    summary = run(suite, out)
    assert summary["ok"] == 6 and {"psnr_db", "ssim", "FD-clip-tiny"} <= set(summary["metrics"])
    assert "clip-tiny pooled" in summary["protocol"]["FD-clip-tiny"]
    with pytest.raises(ConfigError, match="pass --resume"):
        run(suite, out)
    again = run(suite, out, resume=True)
    assert again["metrics"] == summary["metrics"]
    assert len((out / "results.jsonl").read_text().splitlines()) == 6  # nothing redone
    result = CliRunner().invoke(app, ["eval", "report", str(out)])
    assert (
        result.exit_code == 0 and (out / "report.html").is_file() and "FD-clip-tiny" in (out / "report.md").read_text()
    )


def test_bad_items_are_recorded_and_the_run_goes_on(tmp_path, samples):
    manifest = tmp_path / "speech.jsonl"
    (tmp_path / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    manifest.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "id": "good",
                    "path": str(samples / "speech.wav"),
                    "text": "The quick brown fox jumps over the lazy dog.",
                },
                {"id": "no-reference", "path": str(samples / "speech.flac")},
                {"id": "corrupt", "path": str(tmp_path / "broken.wav"), "text": "x"},
            ]
        )
        + "\n"
    )
    suite = write_suite(
        tmp_path,
        f"""
name = "speech-errors"
[dataset]
kind = "speech"
source = "{manifest}"
[pipeline]
tokenizer = "av-tiny"
[metrics]
names = ["wer"]
""",
    )
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(tmp_path / "run")])
    assert result.exit_code == 1
    rows = read_results(tmp_path / "run")
    assert rows["good"]["error"] is None and 0 <= rows["good"]["metrics"]["wer"] <= 1
    assert "no reference transcript" in rows["no-reference"]["error"]
    assert rows["corrupt"]["error"] and "broken.wav" in rows["corrupt"]["error"]


def test_suite_files_are_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) in \[metrics\]: colour"):
        load_suite(write_suite(tmp_path, '[dataset]\nkind = "images"\nsource = "x"\n[metrics]\ncolour = 1\n'))
    with pytest.raises(ConfigError, match="do not apply to images"):
        load_suite(write_suite(tmp_path, '[dataset]\nkind = "images"\nsource = "x"\n[metrics]\nnames = ["wer"]\n'))
    with pytest.raises(ConfigError, match="no such suite"):
        load_suite("no-such-suite")


def test_unreachable_judge_is_skipped_with_its_reason_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOK_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    suite = write_suite(
        tmp_path,
        """
name = "qa-unreachable"
[dataset]
kind = "qa"
source = "builtin:digits-qa"
limit = 2
[metrics]
names = ["accuracy", "judge"]
judge = { kind = "http", base_url = "http://127.0.0.1:9/v1", model = "m", retries = 0, timeout_s = 1 }
on_judge_error = "skip"
""",
    )
    summary = run(suite, tmp_path / "run")
    assert summary["ok"] == 2 and summary["metrics"]["judge_skipped"] == 2
    row = next(iter(read_results(tmp_path / "run").values()))
    assert row["judge"]["status"] == "skipped" and "unreachable" in row["judge"]["reason"]


def _sigkill_then_resume(tmp_path, body: str, total: int, kill_after: int) -> None:
    """An uninterrupted run, and a CLI run SIGKILLed once ``kill_after`` items are done and then resumed, give the
    same rows and the same metrics, value for value, with no item lost or written twice."""
    suite = write_suite(tmp_path, body)
    whole = run(suite, tmp_path / "whole")
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "mmtok.cli.main", "eval", "run", str(suite), "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    deadline = time.time() + 600
    while time.time() < deadline:
        done = len(read_results(out)) if (out / "results.jsonl").exists() else 0
        if done >= kill_after:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(read_results(out))
    assert kill_after <= partial < total
    resumed = run(suite, out, resume=True)
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    ids = [row["id"] for row in lines]
    assert len(ids) == len(set(ids)) == total  # none lost, none duplicated
    assert resumed["metrics"] == whole["metrics"] and resumed["ok"] == total
    same = ("metrics", "tokens", "hypothesis", "candidate")
    expected = {k: {f: v.get(f) for f in same} for k, v in read_results(tmp_path / "whole").items()}
    assert {k: {f: v.get(f) for f in same} for k, v in read_results(out).items()} == expected


@pytest.mark.timeout(900)
def test_sigkill_halfway_then_resume_equals_an_uninterrupted_run(tmp_path):
    _sigkill_then_resume(
        tmp_path,
        """
name = "kill-test"
[dataset]
kind = "qa"
source = "builtin:digits-qa"
limit = 40
[pipeline]
truncation = { method = "mi", threshold = 0.18 }
[metrics]
names = ["accuracy"]
""",
        total=40,
        kill_after=15,
    )


@pytest.mark.timeout(900)
def test_sigkill_halfway_then_resume_equals_an_uninterrupted_run_on_speech(tmp_path):
    # Items 0 and 5 of the held-out sentences are ones where faster-whisper's temperature fallback used to sample
    # (issue 12, finding 7): with it, a resumed run's WER differed from an uninterrupted run's.
    _sigkill_then_resume(
        tmp_path,
        """
name = "kill-test-speech"
[dataset]
kind = "speech"
source = "builtin:heldout-speech"
limit = 6
[pipeline]
tokenizer = "av-tiny"
tokens_per_second = 16
quantize = true
[metrics]
names = ["wer", "cer"]
asr = "whisper"
""",
        total=6,
        kill_after=2,
    )


def test_two_workers_give_the_same_results(tmp_path):
    suite = write_suite(
        tmp_path,
        """
name = "two-workers"
[dataset]
kind = "qa"
source = "builtin:digits-qa"
limit = 12
[metrics]
names = ["accuracy"]
""",
    )
    one = run(suite, tmp_path / "one", workers=1)
    two = run(suite, tmp_path / "two", workers=2)
    assert one["metrics"] == two["metrics"]
    assert {r["worker"] for r in read_results(tmp_path / "two").values()} == {0, 1}


def test_the_qa_summary_says_how_the_judge_scores_right_and_wrong_answers(tmp_path):
    from types import SimpleNamespace

    from mmtok.eval.runner.summary import _qa_metrics

    suite = SimpleNamespace(metrics=["accuracy", "judge"], judge="local")
    ok = [
        {"metrics": {"accuracy": 1, "judge": 5.0}},
        {"metrics": {"accuracy": 1, "judge": 4.0}},
        {"metrics": {"accuracy": 0, "judge": 2.0}},
        {"metrics": {"accuracy": 0, "judge": None}, "judge": {"status": "unparseable"}},
    ]
    metrics, protocol = {}, {}
    _qa_metrics(suite, ok, tmp_path, metrics, protocol)
    assert metrics["accuracy"] == 0.5 and metrics["judge"] == 11 / 3
    assert (metrics["judge_when_right"], metrics["judge_when_wrong"]) == (4.5, 2.0)
    assert metrics["judge_unparseable"] == 1
