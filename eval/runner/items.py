"""One item evaluated: its models loaded once per worker (``Context``), its metrics measured, and its error as
one line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmtok.errors import EvalError, MmtokError
from mmtok.eval.runner.results import _features_path, features_folder
from mmtok.eval.suite import Suite, check_item_file
from mmtok.files import atomic_path


@dataclass
class Context:
    """Models and metric backends, loaded on first use inside each worker."""

    suite: Suite
    out: Path
    _cache: dict[str, Any] | None = None

    def get(self, key: str) -> Any:
        if self._cache is None:
            self._cache = {}
        if key not in self._cache:
            self._cache[key] = self._load(key)
        return self._cache[key]

    def _load(self, key: str) -> Any:
        import mmtok

        p = self.suite.pipeline
        if key == "tokenizer":
            default = {"images": "vq-clip-tiny", "speech": "av-tiny", "qa": "vq-clip-tiny"}[self.suite.kind]
            return mmtok.get_tokenizer(p.get("tokenizer", default)).eval()
        if key == "extractor":
            from mmtok.eval.extractors import get_extractor

            return get_extractor(self.suite.fd_extractor)
        if key == "asr":
            from mmtok.eval.asr import get_asr

            return get_asr(self.suite.asr)
        if key == "judge":
            from mmtok.eval.judge import judge_from_file

            return judge_from_file(self.suite.judge, str(self.suite.path or self.suite.name))
        if key == "backbone":
            return mmtok.get_model(p.get("backbone", "backbone-tiny"), kind="backbone").eval()
        if key == "photos":
            from mmtok.models.data import heldout_photo_crops

            return heldout_photo_crops(int(p.get("image_size", 64)))
        if key == "digits":
            from mmtok.models.digits_qa import task_tokens

            return task_tokens(self.get("tokenizer"), "heldout", 1000, 128, 1)
        raise KeyError(key)


def evaluate_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    if isinstance(item.get("path"), str):
        check_item_file(item["path"])  # a FIFO, a device or an oversized file: this item's error, at once
    kind = ctx.suite.kind
    if kind == "images":
        return _image_item(item, ctx)
    if kind == "speech":
        return _speech_item(item, ctx)
    return _qa_item(item, ctx)


@torch.no_grad()
def _image_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    from safetensors.torch import save_file

    from mmtok.eval.metrics import psnr, ssim

    tok = ctx.get("tokenizer")
    size = int(ctx.suite.pipeline.get("image_size", tok.config.image_size))
    if item.get("builtin") == "heldout-photos":
        x = ctx.get("photos")[item["index"]][None]
    else:
        x = tok.preprocess(item["path"], size)[0][None]
    codes, ids, _ = tok.quantize(x)
    recon = tok.decoder(codes).clamp(-1, 1)
    metrics: dict[str, Any] = {}
    if "psnr" in ctx.suite.metrics:
        metrics["psnr_db"] = psnr(recon, x)
    if "ssim" in ctx.suite.metrics:
        metrics["ssim"] = ssim(recon, x)
    if "fd" in ctx.suite.metrics:
        extractor = ctx.get("extractor")
        features_folder(ctx.out)
        features = {
            "original": extractor.features(x)[0].contiguous(),
            "reconstruction": extractor.features(recon)[0].contiguous(),
        }
        with atomic_path(_features_path(ctx.out, item["id"])) as partial:  # never through a link at its name
            save_file(features, str(partial))
    return {"metrics": metrics, "tokens": int(ids[0].numel())}


def _speech_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    import jiwer

    import mmtok
    from mmtok.eval.asr import _transform

    p = ctx.suite.pipeline
    tok = ctx.get("tokenizer")
    if "text" not in item:
        raise EvalError(f"{item['id']}: no reference transcript ('text')")
    audio = mmtok.load(item["path"], kind="audio")
    with torch.no_grad():
        seq = tok.encode(
            audio,
            tokens_per_second=p.get("tokens_per_second"),
            quantize=p.get("quantize", True),
            codebook_levels=p.get("codebook_levels"),
        )
        speech = tok.decode(seq)
    hypothesis = ctx.get("asr").transcribe(speech)
    measures = jiwer.process_words(
        item["text"], hypothesis or "<empty>", reference_transform=_transform(), hypothesis_transform=_transform()
    )
    words = sum(len(r) for r in measures.references)
    errors = measures.substitutions + measures.deletions + measures.insertions
    chars = jiwer.process_characters(" ".join(measures.references[0]), " ".join(measures.hypotheses[0]))
    char_errors = chars.substitutions + chars.deletions + chars.insertions
    return {
        "metrics": {
            "wer": errors / words,
            "word_errors": errors,
            "words": words,
            "char_errors": char_errors,
            "chars": len(" ".join(measures.references[0])),
        },
        "tokens": len(seq),
        "hypothesis": hypothesis,
        "reference": item["text"],
    }


def _qa_item(item: dict[str, Any], ctx: Context) -> dict[str, Any]:
    import mmtok
    from mmtok.models.data import DIGIT_WORDS
    from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT
    from mmtok.tokens import TokenSequence

    tok = ctx.get("tokenizer")
    data = ctx.get("digits")
    model = ctx.get("backbone")
    side = int(len(data["ids"][0]) ** 0.5)
    seq = TokenSequence("image", ids=data["ids"][item["index"]], grid=(side, side), tokenizer=tok.name)
    options = ctx.suite.pipeline.get("truncation")
    if options:
        seq, _ = mmtok.truncate(seq, context=CONTEXT_PROMPTS, tokenizer=tok, **options)
    prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
    with torch.no_grad():
        predicted = int(model([[prompt, seq]])["logits"].argmax(-1))
    label = int(data["labels"][item["index"]])
    reference = DIGIT_WORDS[label]
    candidate = f"the digit {DIGIT_WORDS[predicted]}"
    metrics: dict[str, Any] = {}
    row: dict[str, Any] = {"tokens": len(seq), "candidate": candidate, "reference": reference}
    if "accuracy" in ctx.suite.metrics:
        metrics["accuracy"] = float(predicted == label)
    if "judge" in ctx.suite.metrics:
        try:
            result = ctx.get("judge").score(candidate, reference, item["question"])
            metrics["judge"] = result.score
            row["judge"] = result.to_dict()
        except EvalError as e:
            if ctx.suite.on_judge_error != "skip":
                raise
            row["judge"] = {"score": None, "status": "skipped", "reason": str(e)}
            metrics["judge"] = None
    row["metrics"] = metrics
    return row


def item_error(e: BaseException) -> str:
    """One line for an item's error: mmtok's own errors already name their input; anything else (a bug, a
    library's exception) is prefixed with its type, so ``TypeError: ...`` is not mistaken for a message."""
    text = str(e).strip().replace("\n", " ") or repr(e)
    return text if isinstance(e, MmtokError) else f"{type(e).__name__}: {text}"
