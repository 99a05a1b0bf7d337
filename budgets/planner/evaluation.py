"""Measuring a setting on the calibration set: cost and tokens through the pricing API, FD, WER, silence cut,
backbone accuracy and judge score, each cached on disk by what it measured."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from mmtok.budgets.planner.checks import user_photos, user_speech
from mmtok.budgets.planner.spec import PROVIDER_DETAIL, SELF_HOSTED, Spec
from mmtok.errors import ConfigError, EvalError
from mmtok.files import write_atomic


def default_cache_dir() -> Path:
    from mmtok.cache import cache_dir

    return cache_dir("planner")


def _digest(paths: Iterable[Path], extra: Iterable[str] = ()) -> str:
    """A content hash of calibration files (and their transcripts), so editing one is a new measurement."""
    digest = hashlib.sha1()
    for path in paths:
        with open(path, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha1").digest())
    for text in extra:
        digest.update(text.encode())
    return digest.hexdigest()[:16]


class CalibrationEvaluator:
    """Objectives of a setting, measured on the calibration set; every measurement cached on disk by its inputs."""

    def __init__(self, spec: Spec, cache_dir: Path | None = None, prices: tuple[Path, ...] | None = None) -> None:
        self.spec = spec
        self.prices = spec.prices if prices is None else tuple(prices)  # the user's price sheets
        self.cache_dir = cache_dir or default_cache_dir()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._models: dict[str, Any] = {}
        self._failures: dict[str, Exception] = {}  # measurement key -> what it raised in this run
        self._weights: dict[str, str] = {}  # model name -> weights fingerprint
        self._sets: dict[str, Any] = {}  # "photos" / "speech" -> (content hash, items)
        self._trims: dict[Path, tuple[Any, float, float]] = {}  # recording -> (trimmed audio, seconds before, after)
        self.trimmed: dict[str, Any] | None = None  # the silence cut on the calibration speech, once measured
        self.evaluations = 0  # distinct settings evaluated
        self.measurements = 0  # component measurements actually run (not from the cache)
        self.on_load: Callable[[str], None] | None = None  # told what model is loading (a cold start takes minutes)

    # -- cache
    def _cached(self, kind: str, params: dict[str, Any], compute: Any) -> Any:
        """``compute()``, or its value stored under ``params``; a damaged entry is measured again, and a measurement
        that failed is not retried within this run (every setting sharing it fails the same way)."""
        key = hashlib.sha1(json.dumps([kind, params], sort_keys=True).encode()).hexdigest()[:20]
        if key in self._failures:
            raise self._failures[key]
        path = self.cache_dir / f"{kind}-{key}.json"
        if path.is_file():
            try:
                entry = json.loads(path.read_text())
                if entry.get("params") == params:
                    return entry["value"]
            except (OSError, ValueError, AttributeError, KeyError):
                pass  # damaged: measured again below
        try:
            value = compute()
        except Exception as e:
            self._failures[key] = e
            raise
        self.measurements += 1
        write_atomic(path, json.dumps({"kind": kind, "params": params, "value": value}))
        return value

    def weights(self, name: str) -> str:
        """A fingerprint of the weights of model ``name`` (vq, av, backbone), part of every cache key that uses it,
        so a retrained model never reuses numbers measured with the old one."""
        if name not in self._weights:
            from mmtok.models.checkpoint import weights_fingerprint

            self._weights[name] = weights_fingerprint(self._get(name))
        return self._weights[name]

    def _get(self, name: str) -> Any:
        if name not in self._models:
            import mmtok

            if self.on_load is not None:
                self.on_load(self._loading(name))

            if name == "vq":
                self._models[name] = mmtok.get_tokenizer("vq-clip-tiny").eval()
            elif name == "av":
                self._models[name] = mmtok.get_tokenizer("av-tiny").eval()
            elif name == "backbone":
                self._models[name] = mmtok.get_model("backbone-tiny", kind="backbone").eval()
            elif name == "extractor":
                from mmtok.eval.extractors import get_extractor

                self._models[name] = get_extractor(self.spec.fd_extractor)
            elif name == "asr":
                from mmtok.eval.asr import get_asr

                self._models[name] = get_asr(self.spec.asr)
            elif name == "judge":
                from mmtok.eval.judge import judge_from_file

                self._models[name] = judge_from_file(self.spec.judge, "the plan spec's [calibration] judge")
        return self._models[name]

    def _loading(self, name: str) -> str:
        """What loading model ``name`` is, in words: "the ASR whisper"."""
        return {
            "vq": "the image tokenizer vq-clip-tiny",
            "av": "the audio tokenizer av-tiny",
            "backbone": "the backbone backbone-tiny",
            "extractor": f"the FD extractor {self.spec.fd_extractor}",
            "asr": f"the ASR {self.spec.asr}",
            "judge": "the judge",
        }.get(name, name)

    # -- components
    def fd(self, model: str, size: int) -> float:
        params = {
            "self_hosted": model == SELF_HOSTED,
            "size": size,
            "n": self.spec.calibration_photos,
            "photos": self._photo_set()[0],
            "extractor": self.spec.fd_extractor,
            "vq": self.weights("vq") if model == SELF_HOSTED else None,
        }
        return self._cached("fd", params, lambda: self._measure_fd(model == SELF_HOSTED, size))

    def _measure_fd(self, self_hosted: bool, size: int) -> float:
        import torch
        import torch.nn.functional as F

        from mmtok.eval.metrics import feature_frechet

        reference = self._reference_photos()  # [N, 3, 256, 256] in [-1, 1]
        with torch.no_grad():
            small = F.interpolate(reference, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
            if self_hosted:
                tok = self._get("vq")
                small = torch.cat(
                    [tok.decoder(tok.quantize(small[i : i + 32])[0]).clamp(-1, 1) for i in range(0, len(small), 32)]
                )
            seen = F.interpolate(small, size=(256, 256), mode="bilinear", align_corners=False)
            extractor = self._get("extractor")
            return feature_frechet(extractor.features(reference), extractor.features(seen))

    def _photo_set(self) -> tuple[str, list[Path] | None]:
        """("heldout", None), or the content hash of the user's photos and their paths."""
        if "photos" not in self._sets:
            paths = None if self.spec.photos_folder is None else user_photos(self.spec)
            self._sets["photos"] = ("heldout", None) if paths is None else (_digest(paths), paths)
        return self._sets["photos"]

    def _reference_photos(self) -> Any:
        import torch

        import mmtok
        from mmtok.models.data import heldout_photo_crops
        from mmtok.models.imaging import resize_to_square

        _, paths = self._photo_set()
        if paths is None:
            return heldout_photo_crops(256, per_photo=max(1, self.spec.calibration_photos // 4))
        photos = [mmtok.load(p, kind="image").to_tensor(draft_size=(256, 256)) for p in paths]  # uint8 [3, H, W]
        return torch.stack([resize_to_square(photo, 256, "crop")[0] for photo in photos])  # [N, 3, 256, 256]

    def _speech_set(self) -> tuple[str, list[tuple[Path, str]]]:
        """("heldout", held-out sentences), or the content hash of the user's recordings and transcripts, and them."""
        if "speech" not in self._sets:
            from mmtok.models.data import heldout_speech

            if self.spec.speech_manifest is None:
                self._sets["speech"] = ("heldout", heldout_speech()[: self.spec.calibration_speech])
            else:
                items = user_speech(self.spec)
                self._sets["speech"] = (_digest([p for p, _ in items], [t for _, t in items]), items)
        return self._sets["speech"]

    def wer(self, model: str, rate: float, levels: int, trim: bool = False) -> float:
        self_hosted = model == SELF_HOSTED
        params: dict[str, Any] = {
            "self_hosted": self_hosted,
            "rate": rate if self_hosted else None,
            "levels": levels if self_hosted else None,
            "n": self.spec.calibration_speech,
            "speech": self._speech_set()[0],
            "asr": self._get("asr").name,  # the protocol (model, decoding, temperature), not just the backend
            "av": self.weights("av") if self_hosted else None,
        }
        if trim:  # only then: a measurement of the speech as it is keeps the key it always had
            params["trim"] = self._trim_params()
        return self._cached("wer", params, lambda: self._measure_wer(self_hosted, rate, levels, trim))

    def _measure_wer(self, self_hosted: bool, rate: float, levels: int, trim: bool = False) -> float:
        import torch

        import mmtok
        from mmtok.eval.asr import wer

        _, items = self._speech_set()
        asr = self._get("asr")
        hyps = []
        for path, _ in items:
            audio = self._trim(path)[0] if trim else mmtok.load(path)
            if self_hosted:
                tok = self._get("av")
                with torch.no_grad():
                    audio = tok.decode(tok.encode(audio, tokens_per_second=rate, codebook_levels=levels))
            hyps.append(asr.transcribe(audio))
        return wer([text for _, text in items], hyps)

    def _min_silence_s(self) -> float:
        from mmtok.budgets.shrink.audio import MIN_SILENCE_S

        return self.spec.min_silence_s if self.spec.min_silence_s is not None else MIN_SILENCE_S

    def _trim_params(self) -> dict[str, Any]:
        """What the silence cut depends on: the VAD and mmtok shrink's cut (at the spec's min_silence_s)."""
        from mmtok.budgets.shrink import audio, vad

        least = self._min_silence_s()
        cut = audio.Cut(least, 1.0, min(audio.KEEP_SILENCE_S, least))  # the cut plan_audio takes with no WER bar
        return {"vad": vad.MODEL, "cut": cut.describe(), "fade_s": audio.FADE_S}

    def silence_trim(self) -> dict[str, Any]:
        """mmtok shrink's silence cut on the calibration speech: seconds before and after it, and the fraction kept
        (the factor on a trimmed setting's billed seconds); measured once per speech set and VAD settings."""
        if self.trimmed is None:
            params = {"speech": self._speech_set()[0], "n": self.spec.calibration_speech, **self._trim_params()}
            self.trimmed = {**self._cached("trim", params, self._measure_trim), "cut": params["cut"]}
        return self.trimmed

    def _measure_trim(self) -> dict[str, Any]:
        _, items = self._speech_set()
        before = after = 0.0
        for path, _ in items:
            _, seconds_before, seconds_after = self._trim(path)
            before, after = before + seconds_before, after + seconds_after
        if before <= 0:
            raise EvalError("the calibration speech is empty: no seconds to trim")
        return {"recordings": len(items), "seconds_before": before, "seconds_after": after, "kept": after / before}

    def _trim(self, path: Path) -> tuple[Any, float, float]:
        """One recording after mmtok shrink's silence cut (``plan_audio`` with no WER bar: the cut is always taken,
        and WER is this planner's to measure): the audio as shrink writes it, and its seconds before and after."""
        if path not in self._trims:
            import io

            import soundfile
            import torch

            import mmtok
            from mmtok.budgets.shrink.audio import AudioJob, plan_audio
            from mmtok.media import Audio

            media = mmtok.load(path, kind="audio")
            shrunk, _ = plan_audio(AudioJob(path, media), [], min_silence_s=self._min_silence_s())
            if shrunk.data is None:  # nothing to cut: the recording as it is
                self._trims[path] = (media, media.duration_s, media.duration_s)
            else:
                wave, rate = soundfile.read(io.BytesIO(shrunk.data), dtype="float32", always_2d=True)
                audio = Audio.from_tensor(torch.from_numpy(np.ascontiguousarray(wave.T)), int(rate))
                self._trims[path] = (audio, media.duration_s, audio.duration_s)
        return self._trims[path]

    def audio_seconds(self, setting: dict[str, Any]) -> float:
        """The request's billed seconds of audio: as sent, or with trim_silence times the fraction the cut kept."""
        if self.spec.audio_seconds > 0 and setting.get("trim_silence"):
            return self.spec.audio_seconds * float(self.silence_trim()["kept"])
        return self.spec.audio_seconds

    def qa(self, keep_ratio: float, size: int) -> dict[str, float]:
        """Backbone accuracy (and judge score, when it is an objective) on held-out digits-on-photos drawn at the
        setting's image size, so its tokens are the (size / 8)^2 the setting sends."""
        params = {
            "keep_ratio": round(keep_ratio, 3),
            "size": size,
            "n": self.spec.calibration_qa,
            "judge": self._get("judge").name if "judge" in self.spec.objectives else None,
            "vq": self.weights("vq"),
            "backbone": self.weights("backbone"),
        }
        return self._cached("qa", params, lambda: self._measure_qa(keep_ratio, size))

    def _measure_qa(self, keep_ratio: float, size: int) -> dict[str, float]:
        import torch

        import mmtok
        from mmtok.models.data import DIGIT_WORDS
        from mmtok.models.digits_qa import CONTEXT_PROMPTS, PROMPT, task_tokens
        from mmtok.tokens import TokenSequence

        tok, model = self._get("vq"), self._get("backbone")
        n = self.spec.calibration_qa
        data = task_tokens(tok, "heldout", n, size, 1)  # ids (n, (size / 8)^2)
        prompt = mmtok.get_tokenizer("text-bytes").encode(PROMPT)
        judged = "judge" in self.spec.objectives
        correct, scores = 0, []
        for i in range(n):
            seq = TokenSequence("image", ids=data["ids"][i], grid=(size // 8, size // 8), tokenizer=tok.name)
            if keep_ratio < 1:
                seq, _ = mmtok.truncate(seq, context=CONTEXT_PROMPTS, tokenizer=tok, keep_ratio=keep_ratio)
            with torch.no_grad():
                predicted = int(model([[prompt, seq]])["logits"].argmax(-1))
            label = int(data["labels"][i])
            correct += predicted == label
            if judged:
                result = self._get("judge").score(f"the digit {DIGIT_WORDS[predicted]}", DIGIT_WORDS[label], PROMPT)
                if result.score is not None:
                    scores.append(result.score)
        values = {"accuracy": correct / n}
        if judged:
            if not scores:
                raise EvalError(f"the judge scored none of the {n} answers")
            values["judge"] = sum(scores) / len(scores)
        return values

    # -- a whole setting
    def tokens_and_cost(self, setting: dict[str, Any]) -> tuple[int, Decimal]:
        """The request's input tokens and its cost, priced as one call through the pricing API."""
        import torch

        from mmtok.budgets.pricing import price
        from mmtok.media import Audio, Image
        from mmtok.tokens import TokenSequence

        spec, model, size = self.spec, setting["model"], int(setting["image_size"])
        seconds = self.audio_seconds(setting)
        items: list[Any] = []
        if model == SELF_HOSTED:
            per_image = math.ceil((size // 8) ** 2 * float(setting["keep_ratio"]))
            grid = (size // 8,) * 2
            items += [TokenSequence("image", ids=torch.zeros(per_image, dtype=torch.long), grid=grid)] * spec.images
            if spec.audio_seconds > 0:
                audio_tokens = math.ceil(seconds * float(setting["audio_tokens_per_second"]))
                items.append(TokenSequence("audio", embeddings=torch.zeros(max(audio_tokens, 1), 1)))
        else:
            items += [Image(None, "size", size, size)] * spec.images
            if spec.audio_seconds > 0:
                items.append(Audio.from_tensor(torch.zeros(max(1, round(seconds * 16000))), 16000))
        quote = price(
            items,
            model,
            detail=PROVIDER_DETAIL,
            text_tokens=spec.text_tokens,
            output_tokens=spec.output_tokens,
            prices=self.prices,
        )
        if quote.missing:
            raise ConfigError(f"{model}: {'; '.join(quote.missing)}")
        return quote.input_tokens, quote.total_cost

    def evaluate(self, setting: dict[str, Any]) -> dict[str, float]:
        self.evaluations += 1
        tokens, cost = self.tokens_and_cost(setting)
        result: dict[str, float] = {"cost": float(cost), "tokens": float(tokens)}
        wanted = set(self.spec.objectives) | set(self.spec.bars)
        if "fd" in wanted:
            result["fd"] = self.fd(setting["model"], int(setting["image_size"]))
        if "wer" in wanted:
            result["wer"] = self.wer(
                setting["model"],
                float(setting["audio_tokens_per_second"]),
                int(setting["codebook_levels"]),
                trim=bool(setting.get("trim_silence", False)),
            )
        if {"accuracy", "judge"} & wanted:
            result.update(self.qa(float(setting["keep_ratio"]), int(setting["image_size"])))
        return result
