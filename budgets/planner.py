"""Token budget planner: NSGA-II (pymoo, mixed variables) over measured cost and quality.

A spec (TOML, see ``budgets/examples/``) names what one request holds (images, seconds of speech, text tokens),
the knobs and their domains, the candidate models, the objectives, quality bars and the token budget:

- knobs: ``image_size`` (px; mmtok tokens = (size/8)^2, or the pixels a provider receives), ``keep_ratio`` (MI
  truncation of visual tokens, self-hosted only), ``audio_tokens_per_second`` and ``codebook_levels`` (the audio
  tokenizer), ``trim_silence`` (audio: mmtok shrink's silence cut first, every model), ``model`` (provider models,
  or ``mmtok-semantic``: the self-hosted mmtok stack);
- ``image_size = "breakpoints"`` (or ``["breakpoints", 64, 128]``): each provider model gets its own sizes, those
  at which its token rule's count changes, from ``mmtok shrink``'s candidates (``budgets/shrink/candidates.py``) for
  a square image of ``MAX_IMAGE_SIZE_PX`` sent at ``PROVIDER_DETAIL``: one size per token count, shrink's largest
  at that count (on rules that count whole tiles or patches one pixel more costs more; Qwen2-VL's rounds, and its
  sizes are whole 28-px cells), and at the top the size the model resizes that image to (its view, same count;
  else the full size), at most ``MAX_BREAKPOINTS`` of them spread evenly over that ladder, smallest and largest
  kept. The sizes
  listed beside it are ``mmtok-semantic``'s (multiples of 8, as without it: its count changes at every one), so
  with ``mmtok-semantic`` among the models at least one is needed, and without it none may be listed. NSGA-II
  then searches the rank of the size on each model's own ladder (rank r of R on a ladder of n sizes is size
  ``round(r (n - 1) / (R - 1))``), and every setting, table and JSON holds the size in pixels;
- ``trim_silence = [false, true]`` (audio only): true sends the speech after ``mmtok shrink``'s silence cut
  (Silero VAD; silences longer than ``[calibration] min_silence_s``, shrink's 0.8 s by default, cut to 0.5 s or
  to min_silence_s if shorter):
  the cut is measured once on the calibration speech (cached by the speech set and the VAD settings), the
  request's ``audio_seconds`` are billed times the fraction it kept, and WER is measured on the trimmed speech;
- objectives, each measured on a calibration set by running the pipeline (``CalibrationEvaluator``):
  ``cost`` (USD per request, ``mmtok.price``), ``fd`` (Fréchet distance on the chosen extractor between the
  calibration photos and what the model receives: mmtok reconstructions, or the photos resized to ``image_size``),
  ``wer`` (of the speech the model receives: reconstructed from tokens, or the original), ``accuracy`` and
  ``judge`` (the MoE backbone answering questions about held-out digits-on-photos from truncated tokens;
  self-hosted only, since provider answers cannot be measured offline);
- constraint: tokens per request <= ``budget_tokens`` (pymoo ``n_ieq_constr``).

Measurements are cached on disk by what they measured (JSON): the setting, the calibration set, the weights of
every model used (``weights_fingerprint``) and the ASR's protocol name, so reruns and the exhaustive grid in
``bench_planner`` reuse them, and a retrained model or another decoder never does. Hypervolume is tracked per
generation (pymoo ``HV``) against one reference point for the whole run (fixed after the first generation: 10% of
the range beyond the worst evaluated value of each objective); the knee point comes from pymoo's
``HighTradeoffPoints``, and the cheapest feasible point that meets every bar is reported with it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from mmtok.errors import ConfigError, EvalError, MmtokError
from mmtok.files import read_toml, write_atomic

OBJECTIVES = {"cost": "min", "fd": "min", "wer": "min", "tokens": "min", "accuracy": "max", "judge": "max"}
KNOBS = ("image_size", "keep_ratio", "audio_tokens_per_second", "codebook_levels", "trim_silence", "model")
AUDIO_KNOBS = ("audio_tokens_per_second", "codebook_levels")
SELF_HOSTED_KNOBS = ("keep_ratio", *AUDIO_KNOBS)  # knobs of the mmtok tokenizers, no provider's
SELF_HOSTED = "mmtok-semantic"
MAX_IMAGE_SIZE_PX = 1024  # image_size options (mmtok: (size / 8)^2 tokens; providers: the pixels they receive)
BREAKPOINTS = "breakpoints"  # image_size option: each provider model's own sizes, where its token count changes
MAX_BREAKPOINTS = 8  # sizes per provider model at most, spread over its ladder
PROVIDER_DETAIL = "high"  # the detail every provider image is priced (and its breakpoints found) at
AUDIO_CODEBOOK_LEVELS = 8  # av-tiny's residual codebook levels
MAX_REQUEST_IMAGES = 1000  # images in the request a plan models (each is priced and measured per setting)
MAX_AUDIO_TOKENS_PER_SECOND = 250.0  # av-tiny's fastest rate (models.av.MelSpec.for_rate: a 16-sample hop)
FAILED_OBJECTIVE = 1e30  # what pymoo sees for a setting whose measurement failed


@dataclass
class Spec:
    name: str
    images: int = 2  # per request
    audio_seconds: float = 20.0
    text_tokens: int = 200
    output_tokens: int = 200
    budget_tokens: int = 10_000
    variables: dict[str, Any] = field(default_factory=dict)
    minimize: list[str] = field(default_factory=lambda: ["cost", "fd", "wer"])
    maximize: list[str] = field(default_factory=list)
    bars: dict[str, float] = field(default_factory=dict)
    calibration_photos: int = 64
    calibration_speech: int = 12
    calibration_qa: int = 100
    photos_folder: Path | None = None  # the user's photos for FD (else held-out crops); relative to the spec file
    speech_manifest: Path | None = None  # JSONL of {"path", "text"} recordings for WER (else held-out sentences)
    fd_extractor: str = "efficientnet-lite0"
    asr: str = "whisper"
    judge: Any = "local"
    min_silence_s: float | None = None  # trim_silence cuts silences longer than this (None: mmtok shrink's default)
    population: int = 24
    generations: int = 10
    seed: int = 1
    path: Path | None = None
    prices: tuple[Path, ...] = ()  # the user's price sheets (``--prices``), over the shipped ones

    @property
    def objectives(self) -> list[str]:
        return [*self.minimize, *self.maximize]


def load_spec(path: str | os.PathLike[str], prices: Iterable[str | os.PathLike[str]] = ()) -> Spec:
    """A planning spec from TOML; a bad key or value is a ConfigError naming it (``spec.toml: [request] images
    must be an integer >= 0, got 'two'``). ``prices``: your own price sheets, whose rows override the shipped ones
    (models are checked against them, and every cost is priced with them)."""
    path = Path(path)
    data = read_toml(path, "spec")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(SECTIONS)}")
    for section, keys in SECTIONS.items():
        if keys is None or section not in data:
            continue
        if not isinstance(data[section], dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        extra = sorted(set(data[section]) - keys)
        if extra and section == "variables":
            raise ConfigError(f"{path}: unknown variable(s) {', '.join(extra)}; the knobs are {', '.join(KNOBS)}")
        if extra:
            raise ConfigError(
                f"{path}: unknown key(s) in [{section}]: {', '.join(extra)}; allowed: {', '.join(sorted(keys))}"
            )
    variables = data.get("variables", {})
    if not variables:  # an empty file too: planning every default for minutes would be a surprise, not a plan
        raise ConfigError(
            f"{path}: no [variables]: a spec names the knobs to search ({', '.join(KNOBS)}); see budgets/examples/"
        )
    read = _Reader(path, data)
    spec = Spec(
        name=read.string(None, "name", path.stem),
        path=path,
        images=read.integer("request", "images", 2, minimum=0, maximum=MAX_REQUEST_IMAGES),
        audio_seconds=read.number("request", "audio_seconds", 20.0, minimum=0, maximum=4 * 3600),
        text_tokens=read.integer("request", "text_tokens", 200, minimum=0),
        output_tokens=read.integer("request", "output_tokens", 200, minimum=0),
        budget_tokens=read.integer("request", "budget_tokens", 10_000, minimum=1),
        variables={knob: read.knob(knob, variables[knob]) for knob in KNOBS if knob in variables},
        minimize=read.names("objectives", "minimize", ["cost", "fd", "wer"]),
        maximize=read.names("objectives", "maximize", []),
        bars={name: read.number("bars", name, 0.0) for name in data.get("bars", {})},
        calibration_photos=read.integer("calibration", "photos", 64, minimum=2),
        calibration_speech=read.integer("calibration", "speech", 12, minimum=1),
        calibration_qa=read.integer("calibration", "qa", 100, minimum=1),
        photos_folder=read.relative_path("calibration", "photos_folder"),
        speech_manifest=read.relative_path("calibration", "speech_manifest"),
        fd_extractor=read.string("calibration", "fd_extractor", "efficientnet-lite0"),
        asr=read.string("calibration", "asr", "whisper"),
        judge=data.get("calibration", {}).get("judge", "local"),
        min_silence_s=read.optional_number("calibration", "min_silence_s", minimum=0.1),
        population=read.integer("search", "population", 24, minimum=4),
        generations=read.integer("search", "generations", 10, minimum=1),
        seed=read.integer("search", "seed", 1, minimum=0),
        prices=tuple(Path(p) for p in prices),
    )
    validate(spec)
    return spec


SECTIONS: dict[str, set[str] | None] = {  # None: a value, not a table
    "name": None,
    "request": {"images", "audio_seconds", "text_tokens", "output_tokens", "budget_tokens"},
    "variables": set(KNOBS),
    "objectives": {"minimize", "maximize"},
    "bars": set(OBJECTIVES),
    "calibration": {
        "photos",
        "speech",
        "qa",
        "fd_extractor",
        "asr",
        "judge",
        "photos_folder",
        "speech_manifest",
        "min_silence_s",
    },
    "search": {"population", "generations", "seed"},
}


class _Reader:
    """Typed values of a parsed spec; each wrong one is a ConfigError naming its section and key."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path, self.data = path, data

    def _raw(self, section: str | None, key: str, default: Any) -> Any:
        return (self.data if section is None else self.data.get(section, {})).get(key, default)

    def _where(self, section: str | None, key: str) -> str:
        return f"{self.path}: {key}" if section is None else f"{self.path}: [{section}] {key}"

    def integer(self, section: str | None, key: str, default: int, minimum: int, maximum: int = 10**9) -> int:
        value = self._raw(section, key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise ConfigError(
                f"{self._where(section, key)} must be an integer from {minimum} to {maximum:,}, got {value!r}"
            )
        return value

    def number(
        self, section: str | None, key: str, default: float, minimum: float | None = None, maximum: float = math.inf
    ) -> float:
        value = self._raw(section, key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{self._where(section, key)} must be a finite number, got {value!r}")
        if minimum is not None and value < minimum:
            raise ConfigError(f"{self._where(section, key)} must be >= {minimum:g}, got {value!r}")
        if value > maximum:
            raise ConfigError(f"{self._where(section, key)} must be at most {maximum:,g}, got {value!r}")
        return float(value)

    def optional_number(self, section: str, key: str, minimum: float) -> float | None:
        """A number, or None when the key is not given."""
        if self._raw(section, key, None) is None:
            return None
        return self.number(section, key, 0.0, minimum)

    def string(self, section: str | None, key: str, default: str) -> str:
        value = self._raw(section, key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self._where(section, key)} must be a non-empty string, got {value!r}")
        return value

    def relative_path(self, section: str, key: str) -> Path | None:
        """A path relative to the spec file's folder (or absolute); None when the key is not given."""
        value = self._raw(section, key, None)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self._where(section, key)} must be a path (a string), got {value!r}")
        return Path(os.path.normpath(self.path.parent / Path(value).expanduser()))  # a/b/../c -> a/c, for people

    def names(self, section: str, key: str, default: list[str]) -> list[str]:
        value = self._raw(section, key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f'{self._where(section, key)} must be a list of names (e.g. ["cost"]), got {value!r}')
        return list(value)

    def knob(self, knob: str, value: Any) -> Any:
        """A knob's domain: one value, a list of options, or (keep_ratio only) a range ``{low, high}``."""
        where = self._where("variables", knob)
        if knob == "keep_ratio" and isinstance(value, dict):
            if set(value) - {"low", "high"}:
                raise ConfigError(f"{where}: a range takes only low and high, got {', '.join(sorted(value))}")
            low, high = (self._option(knob, value.get(k, d), where) for k, d in (("low", 0.1), ("high", 1.0)))
            if low > high:
                raise ConfigError(f"{where}: low ({low:g}) is above high ({high:g})")
            return {"low": low, "high": high}
        options = value if isinstance(value, list) else [value]
        if not options:
            raise ConfigError(f"{where} has no options")
        checked = [self._option(knob, option, where) for option in options]
        if len(set(checked)) < len(checked):
            raise ConfigError(f"{where} lists an option twice: {options}")
        return checked if isinstance(value, list) else checked[0]

    @staticmethod
    def _option(knob: str, option: Any, where: str) -> Any:
        if knob == "model":
            if not isinstance(option, str) or not option:
                raise ConfigError(f"{where}: a model is a name, got {option!r}")
            return option
        if knob == "trim_silence":
            if not isinstance(option, bool):
                raise ConfigError(f"{where}: trim_silence is true or false (both: [false, true]), got {option!r}")
            return option
        number = isinstance(option, (int, float)) and not isinstance(option, bool)
        if knob == "image_size":
            if option == BREAKPOINTS:
                return option
            if not number or option != int(option) or not 8 <= option <= MAX_IMAGE_SIZE_PX or option % 8:
                raise ConfigError(
                    f"{where}: an image size is a multiple of 8 px from 8 to {MAX_IMAGE_SIZE_PX}, or "
                    f'"{BREAKPOINTS}" (each provider model\'s own sizes), got {option!r}'
                )
            return int(option)
        if knob == "codebook_levels":
            if not number or option != int(option) or not 1 <= option <= AUDIO_CODEBOOK_LEVELS:
                raise ConfigError(f"{where}: levels are an integer from 1 to {AUDIO_CODEBOOK_LEVELS}, got {option!r}")
            return int(option)
        if knob == "keep_ratio":
            if not number or not 0 < option <= 1:
                raise ConfigError(f"{where}: a keep ratio is in (0, 1], got {option!r}")
            return float(option)
        if not number or not 0 < option <= MAX_AUDIO_TOKENS_PER_SECOND:  # audio_tokens_per_second
            raise ConfigError(f"{where}: a token rate is in (0, {MAX_AUDIO_TOKENS_PER_SECOND}], got {option!r}")
        return float(option)


def validate(spec: Spec) -> None:
    """What a spec asks must be measurable: known objectives, bars on them, known models that take the request's
    media, knobs that apply to the request, and the backends the objectives need."""
    where = spec.path or spec.name
    _check_objectives(spec, where)
    models = candidate_models(spec)
    from mmtok.budgets.pricing import rate_card, resolve

    for model in models:
        rate_card(resolve(model, spec.prices))  # unknown models fail here (PriceError), with the closest names
        if model != SELF_HOSTED:
            _check_modalities(model, spec, where)
    _check_applicable(spec, models, where)
    _check_breakpoints(spec, models, where)
    if True in _options(spec, "trim_silence"):
        _need_modules(where, "[variables] trim_silence", "silero-vad, onnxruntime", "onnxruntime", "silero_vad")
    if spec.photos_folder is not None:
        user_photos(spec)  # a missing or empty folder fails here, naming the key
    if spec.speech_manifest is not None:
        user_speech(spec)
    if {"accuracy", "judge"} & set(spec.objectives) and any(m != SELF_HOSTED for m in models):
        raise ConfigError(
            f"{where}: accuracy and judge are measured on the self-hosted mmtok backbone; provider "
            'answers cannot be measured offline: use model = ["mmtok-semantic"] or drop them'
        )
    _check_backends(spec, where)


def _check_objectives(spec: Spec, where: str) -> None:
    """Known objectives, each once, each in its own direction; bars only on objectives, in their ranges."""
    for name in spec.objectives:
        if name not in OBJECTIVES:
            raise ConfigError(f"{where}: unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
        wanted = "min" if name in spec.minimize else "max"
        if OBJECTIVES[name] != wanted:
            raise ConfigError(
                f"{where}: {name} can only be {'minimised' if OBJECTIVES[name] == 'min' else 'maximised'}"
            )
    if not spec.objectives:
        raise ConfigError(f"{where}: no objectives")
    if len(set(spec.objectives)) < len(spec.objectives):
        raise ConfigError(f"{where}: [objectives] names an objective twice")
    for name, bar in spec.bars.items():
        if name not in spec.objectives:
            raise ConfigError(f"{where}: a bar on {name!r}, which is not an objective")
        if name in ("accuracy",) and not 0 <= bar <= 1:
            raise ConfigError(f"{where}: the accuracy bar must be in [0, 1], got {bar}")
        if name == "judge" and not 1 <= bar <= 5:
            raise ConfigError(f"{where}: the judge bar must be in [1, 5], got {bar}")
        if name in ("wer", "fd", "cost", "tokens") and bar < 0:
            raise ConfigError(f"{where}: a bar on {name} cannot be negative")


def _need_modules(where: str, what: str, packages: str, *modules: str) -> None:
    """``what`` needs the eval extra: a ConfigError naming the packages when one of ``modules`` is missing."""
    import importlib

    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{where}: {what} needs the eval extra ({packages}): pip install 'mmtok[eval]'") from None


def _check_backends(spec: Spec, where: str) -> None:
    """The FD extractor, the judge and the ASR the objectives name exist and can be loaded."""
    if "fd" in spec.objectives and not _known_extractor(spec.fd_extractor):
        raise ConfigError(
            f"{where}: [calibration] fd_extractor {spec.fd_extractor!r} is unknown; "
            "use efficientnet-lite0, inception or clip-tiny"
        )
    if "judge" in spec.objectives:
        _need_modules(where, "the judge objective", "transformers", "transformers")
        from mmtok.eval.judge import judge_from_file

        try:
            judge_from_file(spec.judge, where)
        except EvalError as e:
            raise ConfigError(f"{where}: [calibration] judge: {e}") from None
    if "wer" in spec.objectives:
        _need_modules(where, "the wer objective", "faster-whisper, jiwer", "faster_whisper", "jiwer")
        from mmtok.eval.asr import get_asr

        try:
            get_asr(spec.asr)
        except EvalError as e:
            raise ConfigError(f"{where}: [calibration] asr: {e}") from None


def user_photos(spec: Spec) -> list[Path]:
    """The images under ``[calibration] photos_folder`` (``mmtok.scan``: sorted, recursive; other media and files
    that cannot be read are skipped), at most ``photos`` of them."""
    import mmtok
    from mmtok.media import Image

    where, folder = f"{spec.path or spec.name}: [calibration] photos_folder {spec.photos_folder}", spec.photos_folder
    if folder is None or not folder.is_dir():
        raise ConfigError(f"{where}: no such folder")
    found: list[Path] = []
    for item in mmtok.scan([folder]):
        if isinstance(item, Image) and item.path is not None:
            found.append(item.path)
            if len(found) == spec.calibration_photos:
                break
    if len(found) < 2:
        raise ConfigError(f"{where}: {'no images' if not found else 'one image'} in it; FD needs at least 2")
    return found


def user_speech(spec: Spec) -> list[tuple[Path, str]]:
    """The recordings of ``[calibration] speech_manifest``: one JSON object ``{"path", "text"}`` a line, each path
    relative to the manifest's folder (or absolute), at most ``speech`` of them."""
    import mmtok
    from mmtok.files import parse_json, read_text

    where = f"{spec.path or spec.name}: [calibration] speech_manifest"
    manifest = spec.speech_manifest
    if manifest is None or not manifest.is_file():
        raise ConfigError(f"{where} {manifest}: no such file")
    items: list[tuple[Path, str]] = []
    for number, line in enumerate(read_text(manifest, "speech manifest").splitlines(), 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{where} {manifest}:{number}")
        if not isinstance(row, dict) or not isinstance(row.get("path"), str) or not isinstance(row.get("text"), str):
            raise ConfigError(f'{where} {manifest}:{number}: each line must be {{"path": ..., "text": ...}}')
        audio = Path(os.path.normpath(manifest.parent / Path(row["path"]).expanduser()))
        try:
            mmtok.load(audio, kind="audio")  # the header only: a missing or non-audio file fails here
        except MmtokError as e:
            raise ConfigError(f"{where} {manifest}:{number}: {e}") from None
        items.append((audio, row["text"]))
        if len(items) == spec.calibration_speech:
            break
    if not items:
        raise ConfigError(f"{where} {manifest}: no recordings in it")
    return items


def calibration_sets(spec: Spec) -> dict[str, str]:
    """What FD and WER are measured on, in words, for the report."""
    if spec.photos_folder is not None:
        photos = f"{len(user_photos(spec))} of your photos ({spec.photos_folder}, centre-cropped to 256 px)"
    else:
        photos = f"{4 * max(1, spec.calibration_photos // 4)} held-out photo crops (256 px)"
    if spec.speech_manifest is not None:
        speech = f"{len(user_speech(spec))} of your recordings ({spec.speech_manifest})"
    else:
        speech = f"{spec.calibration_speech} held-out Harvard sentences (espeak-ng)"
    return {"photos": photos, "speech": speech}


def _digest(paths: Iterable[Path], extra: Iterable[str] = ()) -> str:
    """A content hash of calibration files (and their transcripts), so editing one is a new measurement."""
    digest = hashlib.sha1()
    for path in paths:
        with open(path, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha1").digest())
    for text in extra:
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def candidate_models(spec: Spec) -> list[str]:
    models = spec.variables.get("model", [SELF_HOSTED])
    return models if isinstance(models, list) else [models]


def _known_extractor(name: str) -> bool:
    """The names ``mmtok.eval.extractors.get_extractor`` takes, checked without loading any weights."""
    return name in ("inception", "inception-v3", "fid", "efficientnet-lite0", "efficientnet") or name.startswith(
        ("teacher:", "clip")
    )


def _check_applicable(spec: Spec, models: list[str], where: str) -> None:
    """A knob given for media the request does not send, or only for models the spec does not try, is a mistake
    (it would be searched, and suggested, for nothing); so is an objective on media that are not sent."""
    given = set(spec.variables)
    if spec.images == 0 and (knobs := sorted(given & {"image_size", "keep_ratio"})):
        raise ConfigError(
            f"{where}: [variables] {knobs[0]} is set, but the request sends no images ([request] images = 0)"
        )
    if spec.images == 0 and (names := [o for o in spec.objectives if o in ("fd", "accuracy", "judge")]):
        raise ConfigError(f"{where}: the {names[0]} objective measures images, but the request sends none")
    if spec.audio_seconds == 0 and (knobs := sorted(given & {*AUDIO_KNOBS, "trim_silence"})):
        raise ConfigError(
            f"{where}: [variables] {knobs[0]} is set, but the request sends no audio ([request] audio_seconds = 0)"
        )
    if spec.audio_seconds == 0 and "wer" in spec.objectives:
        raise ConfigError(f"{where}: the wer objective measures speech, but the request sends none")
    if SELF_HOSTED not in models and (knobs := sorted(given & {"keep_ratio", *AUDIO_KNOBS})):
        raise ConfigError(
            f"{where}: [variables] {knobs[0]} applies only to {SELF_HOSTED}, which is not among the models"
        )


def _check_breakpoints(spec: Spec, models: list[str], where: str) -> None:
    """``"breakpoints"`` gives provider models their sizes; the sizes listed beside it are mmtok-semantic's."""
    options = _options(spec, "image_size")
    if BREAKPOINTS not in options:
        return
    listed = [str(o) for o in options if o != BREAKPOINTS]
    providers = [m for m in models if m != SELF_HOSTED]
    if not providers:
        raise ConfigError(
            f'{where}: [variables] image_size "{BREAKPOINTS}" are the sizes at which a provider model\'s token count '
            f"changes, and the models are only {SELF_HOSTED}: list its sizes (multiples of 8) instead"
        )
    if SELF_HOSTED in models and not listed:
        raise ConfigError(
            f'{where}: [variables] image_size = "{BREAKPOINTS}" gives {SELF_HOSTED} no sizes (its tokens change at '
            f'every multiple of 8): list them beside it, e.g. ["{BREAKPOINTS}", 64, 128]'
        )
    if listed and SELF_HOSTED not in models:
        raise ConfigError(
            f'{where}: [variables] image_size: beside "{BREAKPOINTS}" the sizes listed ({", ".join(listed)}) are '
            f"{SELF_HOSTED}'s, which is not among the models: drop them"
        )
    for model in providers:
        image_sizes(spec, model)  # a model whose image rule cannot be priced at the planner's detail fails here


def _check_modalities(model: str, spec: Spec, where: str) -> None:
    """A provider model must take every modality the request sends (GPT-4o audio models take no images)."""
    from mmtok.budgets.pricing import resolve

    for kind, modality, sent in (("images", "image", spec.images), ("audio", "audio", spec.audio_seconds)):
        if sent > 0 and not resolve(model).accepts(modality):
            raise ConfigError(f"{where}: the request sends {kind}, but model {model} does not take {kind}; remove it")


# ------------------------------------------------------------------------------------------------ variables
def domains(spec: Spec) -> dict[str, Any]:
    """pymoo variables for the spec's knobs (a fixed value is a one-choice variable; per-model image sizes are one
    variable of ranks, each setting's size the one at its rank on its model's ladder: ``resolve_setting``)."""
    from pymoo.core.variable import Choice, Real

    out = {}
    for knob in KNOBS:
        value = spec.variables.get(knob, DEFAULTS[knob])
        if knob == "image_size" and per_model_sizes(spec):  # the rank on each model's own ladder
            out[knob] = Choice(options=list(range(_size_ranks(spec))))
            continue
        if knob == "keep_ratio" and isinstance(value, dict):
            low, high = float(value.get("low", 0.1)), float(value.get("high", 1.0))
            if not 0 < low <= high <= 1:
                raise ConfigError(f"{spec.path}: [variables] keep_ratio must satisfy 0 < low <= high <= 1")
            out[knob] = Real(bounds=(low, high))
            continue
        options = value if isinstance(value, list) else [value]
        if not options:
            raise ConfigError(f"{spec.path}: [variables] {knob} has no options")
        out[knob] = Choice(options=[float(v) for v in options] if knob == "keep_ratio" else options)
    return out


DEFAULTS: dict[str, Any] = {  # a knob the spec does not name
    "image_size": [64],
    "keep_ratio": 1.0,
    "audio_tokens_per_second": [16.0],
    "codebook_levels": [8],
    "trim_silence": [False],
    "model": [SELF_HOSTED],
}


def _options(spec: Spec, knob: str) -> list[Any]:
    value = spec.variables.get(knob, DEFAULTS[knob])
    return value if isinstance(value, list) else [value]


def per_model_sizes(spec: Spec) -> bool:
    """Whether image sizes are each model's own (``image_size`` lists ``"breakpoints"``)."""
    return BREAKPOINTS in _options(spec, "image_size")


def image_sizes(spec: Spec, model: str) -> list[int]:
    """The image sizes (px) tried on ``model``: the spec's list; with ``"breakpoints"``, a provider model's own
    sizes (``model_breakpoints``) and, for mmtok-semantic, the sizes listed beside it."""
    options = _options(spec, "image_size")
    if BREAKPOINTS not in options:
        return [int(o) for o in options]
    if model == SELF_HOSTED:
        return sorted(int(o) for o in options if o != BREAKPOINTS)
    return list(model_breakpoints(model, spec.prices))


def model_breakpoints(model: str, prices: Iterable[str | os.PathLike[str]] = ()) -> tuple[int, ...]:
    """The sizes (px, square) at which ``model``'s image token count changes, smallest first: at most
    ``MAX_BREAKPOINTS``, from mmtok shrink's candidates for a ``MAX_IMAGE_SIZE_PX`` square at ``PROVIDER_DETAIL``."""
    return _breakpoints(model, tuple(Path(p) for p in prices))


@functools.lru_cache(maxsize=256)
def _breakpoints(model: str, prices: tuple[Path, ...]) -> tuple[int, ...]:
    from mmtok.budgets.pricing import image_token_count, resolve
    from mmtok.budgets.shrink.candidates import candidates, lossless

    resolved, side = resolve(model, prices), MAX_IMAGE_SIZE_PX
    sizes = [
        r.width
        for r in candidates(resolved, side, side, PROVIDER_DETAIL, prices)
        if r.width == r.height and r.detail in (None, PROVIDER_DETAIL)
    ]
    view = lossless(resolved, side, side, PROVIDER_DETAIL, prices)  # what the model resizes the full size to
    sizes.append(view.width if view is not None and view.width == view.height else side)
    largest: dict[int, int] = {}  # tokens at the planner's detail -> the largest size with that count
    for size in sizes:
        tokens = image_token_count(size, size, model, PROVIDER_DETAIL, prices).tokens
        largest[tokens] = max(largest.get(tokens, 0), size)
    ladder = sorted(largest.values())
    if len(ladder) > MAX_BREAKPOINTS:
        picks = sorted({_spread(i, MAX_BREAKPOINTS, len(ladder)) for i in range(MAX_BREAKPOINTS)})
        ladder = [ladder[i] for i in picks]
    return tuple(ladder)


def _spread(rank: int, ranks: int, n: int) -> int:
    """Rank ``rank`` of ``ranks`` as an index into ``n`` items spread evenly (the first and the last kept)."""
    return 0 if ranks <= 1 else int(rank * (n - 1) / (ranks - 1) + 0.5)


def _size_ranks(spec: Spec) -> int:
    return max(len(image_sizes(spec, m)) for m in candidate_models(spec))


def resolve_setting(spec: Spec, x: dict[str, Any]) -> dict[str, Any]:
    """A setting from pymoo's variables: Python scalars, and with per-model sizes the image size in pixels (the
    size at the variable's rank on the setting's model's ladder)."""
    setting = {k: (float(v) if k == "keep_ratio" else _plain(v)) for k, v in x.items()}
    if "image_size" in setting and per_model_sizes(spec):
        sizes = image_sizes(spec, setting["model"])
        setting["image_size"] = sizes[_spread(int(setting["image_size"]), _size_ranks(spec), len(sizes))]
    return setting


def knob_applies(spec: Spec, knob: str, model: str | None = None) -> bool:
    """Whether a knob changes anything: for the media the request sends and, given a model, for that model
    (keep_ratio and the audio knobs are the mmtok tokenizers'; a provider gets the image resized, the audio as is
    or, with trim_silence, with its silences cut)."""
    if knob in ("image_size", "keep_ratio") and spec.images == 0:
        return False
    if knob in (*AUDIO_KNOBS, "trim_silence") and spec.audio_seconds == 0:
        return False
    if knob in SELF_HOSTED_KNOBS:
        return SELF_HOSTED in candidate_models(spec) if model is None else model == SELF_HOSTED
    return True


def applicable_setting(spec: Spec, setting: dict[str, Any]) -> dict[str, Any]:
    """The knobs of ``setting`` that apply to it (no audio knobs without audio, no keep_ratio for a provider)."""
    return {k: v for k, v in setting.items() if knob_applies(spec, k, setting.get("model"))}


def _distinct(spec: Spec, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per setting of the knobs that apply (gemini at 128 px is one setting, whatever the audio knobs)."""
    out, seen = [], set()
    for entry in entries:
        key = setting_key(applicable_setting(spec, entry["setting"]))
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def setting_key(setting: dict[str, Any]) -> str:
    clean = {k: (round(float(v), 3) if k == "keep_ratio" else _plain(v)) for k, v in setting.items()}
    return json.dumps(clean, sort_keys=True)


def _plain(value: Any) -> Any:
    """numpy scalars (pymoo hands its Choice values back as np.int64 / np.str_) -> Python scalars."""
    if isinstance(value, str):
        return str(value)  # np.str_ -> str
    return value.item() if hasattr(value, "item") else value


# ------------------------------------------------------------------------------------------------ measuring
def default_cache_dir() -> Path:
    from mmtok.cache import cache_dir

    return cache_dir("planner")


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


# ------------------------------------------------------------------------------------------------ search
@dataclass
class Plan:
    spec: Spec
    front: list[dict[str, Any]]  # {"setting": ..., "objectives": ...} on the Pareto front
    evaluated: list[dict[str, Any]]
    history: list[dict[str, float]]  # per generation: hypervolume, best cost at the bars
    knee: dict[str, Any] | None
    cheapest_meeting_bars: dict[str, Any] | None
    shortfall: str | None = None  # why nothing is feasible, when that happens
    evaluations: int = 0
    measurements: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)  # {"setting", "error"} of each failed setting
    reference_point: list[float] | None = None  # of every generation's hypervolume, as pymoo minimises
    population: int = 0  # NSGA-II population and generations this run used (the spec's, or the overrides)
    generations: int = 0
    silence_trim: dict[str, Any] | None = None  # the silence cut on the calibration speech, where it was measured

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data: each setting holds only the knobs that apply to it, and a value that was not
        measured is None, never NaN."""
        spec = self.spec

        def entry(e: dict[str, Any] | None) -> dict[str, Any] | None:
            if e is None:
                return None
            return {
                "setting": applicable_setting(spec, e["setting"]),
                "objectives": e["objectives"],
                "meets_bars": e["objectives"]["tokens"] <= spec.budget_tokens and meets_bars(spec, e["objectives"]),
            }

        return _json_safe(
            {
                "spec": spec.name,
                "objectives": {o: OBJECTIVES[o] for o in spec.objectives},
                "bars": spec.bars,
                "budget_tokens": spec.budget_tokens,
                "population": self.population,
                "generations": self.generations,
                "evaluations": self.evaluations,
                "measurements": self.measurements,
                "front": [entry(e) for e in self.front],
                "knee": entry(self.knee),
                "cheapest_meeting_bars": entry(self.cheapest_meeting_bars),
                "shortfall": self.shortfall,
                "history": self.history,
                "reference_point": self.reference_point,
                "failed": [{**f, "setting": applicable_setting(spec, f["setting"])} for f in self.failed],
                **({"silence_trim": self.silence_trim} if self.silence_trim is not None else {}),
            }
        )


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return _plain(value) if hasattr(value, "item") else value


def objective_vector(spec: Spec, values: dict[str, float]) -> list[float]:
    """Objectives as pymoo minimises them (maximised ones negated)."""
    return [values[o] if o in spec.minimize else -values[o] for o in spec.objectives]


def meets_bars(spec: Spec, values: dict[str, float]) -> bool:
    for name, bar in spec.bars.items():
        value = values.get(name)
        if value is None or (math.isnan(value)) or (value > bar if OBJECTIVES[name] == "min" else value < bar):
            return False
    return True


def reference_point(spec: Spec, rows: list[dict[str, float]]) -> np.ndarray:
    """A reference for hypervolume: 10% of the range beyond the worst of every objective in ``rows``.

    ``plan()`` fixes it once, from the first generation's points, so that every generation's hypervolume is
    measured against the same point (points beyond it add nothing); ``bench_planner`` fixes it from the grid."""
    matrix = np.array([objective_vector(spec, r) for r in rows])
    worst, best = matrix.max(0), matrix.min(0)
    return worst + 0.1 * np.maximum(worst - best, 1e-9)


def hypervolume(spec: Spec, rows: list[dict[str, float]], ref: np.ndarray | None) -> float:
    from pymoo.indicators.hv import HV

    if not rows or ref is None:
        return 0.0
    return float(HV(ref_point=ref)(np.array([objective_vector(spec, r) for r in rows])))


def pareto_rows(spec: Spec, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    feasible = [e for e in entries if e["objectives"]["tokens"] <= spec.budget_tokens]
    if not feasible:
        return []
    matrix = np.array([objective_vector(spec, e["objectives"]) for e in feasible])
    front = NonDominatedSorting().do(matrix, only_non_dominated_front=True)
    return [feasible[i] for i in front]


def plan(
    spec: Spec | str | os.PathLike[str],
    *,
    population: int | None = None,
    generations: int | None = None,
    evaluator: CalibrationEvaluator | None = None,
    on_generation: Callable[[dict[str, Any]], None] | None = None,
    on_evaluation: Callable[[dict[str, Any]], None] | None = None,
    prices: Iterable[str | os.PathLike[str]] | None = None,
) -> Plan:
    """Search the spec's knobs with NSGA-II; returns the Pareto front, the knee and the cheapest point at the bars.

    ``prices``: your own price sheets (rows override the shipped ones); by default the spec's (``load_spec``).
    ``on_evaluation`` is called after every evaluation NSGA-II asks for (``evaluation`` of at most ``of``, the
    ``generation``, distinct ``settings`` so far), ``on_generation`` after each generation with its history record.
    """
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.mixed import MixedVariableDuplicateElimination, MixedVariableMating, MixedVariableSampling
    from pymoo.optimize import minimize

    if not isinstance(spec, Spec):
        spec = load_spec(spec, prices or ())
    elif prices is not None:
        spec = replace(spec, prices=tuple(Path(p) for p in prices))
        validate(spec)  # its models, priced with these sheets
    population_used, generations_used = population or spec.population, generations or spec.generations
    search = _Search(
        spec, evaluator or CalibrationEvaluator(spec), population_used * generations_used, on_evaluation, on_generation
    )
    algorithm = NSGA2(
        pop_size=population_used,
        sampling=MixedVariableSampling(),
        mating=MixedVariableMating(eliminate_duplicates=MixedVariableDuplicateElimination()),
        eliminate_duplicates=MixedVariableDuplicateElimination(),
    )
    minimize(
        _problem(search),
        algorithm,
        ("n_gen", generations_used),
        seed=spec.seed,
        callback=_tracker(search),
        verbose=False,
    )
    result = summarise(spec, list(search.seen.values()), search.history, search.evaluator, list(search.failed.values()))
    result.reference_point = None if search.reference is None else [float(v) for v in search.reference]
    result.population, result.generations = population_used, generations_used
    result.silence_trim = getattr(search.evaluator, "trimmed", None)
    return result


@dataclass
class _Search:
    """One NSGA-II run's state: the settings measured (each once), those whose measurement failed, the history per
    generation, and the one hypervolume reference point, fixed when the first generation is measured."""

    spec: Spec
    evaluator: CalibrationEvaluator
    of: int  # evaluations asked for at most (duplicates are not bred twice)
    on_evaluation: Callable[[dict[str, Any]], None] | None = None
    on_generation: Callable[[dict[str, Any]], None] | None = None
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)  # {"setting", "error"}
    history: list[dict[str, Any]] = field(default_factory=list)
    reference: np.ndarray | None = None
    calls: int = 0

    def evaluate(self, x: dict[str, Any]) -> tuple[list[float], list[float]]:
        """pymoo's objectives F and constraint G for one setting (a failed one: worse than anything, infeasible)."""
        spec = self.spec
        setting = resolve_setting(spec, x)
        key = setting_key(setting)
        if key not in self.seen and key not in self.failed:
            try:
                self.seen[key] = {"setting": setting, "objectives": self.evaluator.evaluate(setting)}
            except Exception as e:  # a measurement error is this setting's, recorded; the search goes on
                self.failed[key] = {"setting": setting, "error": _error_line(e)}
        self.calls += 1
        if self.on_evaluation:
            self.on_evaluation(
                {
                    "evaluation": self.calls,
                    "of": self.of,
                    "generation": len(self.history) + 1,
                    "settings": len(self.seen) + len(self.failed),
                    "failed": len(self.failed),
                }
            )
        if key in self.failed:  # never on the front, never bred from
            return [FAILED_OBJECTIVE] * len(spec.objectives), [FAILED_OBJECTIVE]
        values = self.seen[key]["objectives"]
        return objective_vector(spec, values), [values["tokens"] - spec.budget_tokens]

    def record(self, generation: int) -> None:
        spec, entries = self.spec, list(self.seen.values())
        if self.reference is None and entries:
            self.reference = reference_point(spec, [e["objectives"] for e in entries])
        front = pareto_rows(spec, entries)
        at_bars = [
            e for e in entries if e["objectives"]["tokens"] <= spec.budget_tokens and meets_bars(spec, e["objectives"])
        ]
        record = {
            "generation": generation,
            "evaluations": len(self.seen),
            "hypervolume": hypervolume(spec, [e["objectives"] for e in front], self.reference),
            "best_cost_at_bars": min((e["objectives"]["cost"] for e in at_bars), default=None),
        }
        self.history.append(record)
        if self.on_generation:
            self.on_generation(record)


def _problem(search: _Search) -> Any:
    """The pymoo mixed-variable problem whose evaluations are the search's."""
    from pymoo.core.problem import ElementwiseProblem

    class Problem(ElementwiseProblem):
        def __init__(self) -> None:
            super().__init__(vars=domains(search.spec), n_obj=len(search.spec.objectives), n_ieq_constr=1)

        def _evaluate(self, x: dict[str, Any], out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            out["F"], out["G"] = search.evaluate(x)

    return Problem()


def _tracker(search: _Search) -> Any:
    from pymoo.core.callback import Callback

    class Track(Callback):
        def notify(self, algorithm: Any) -> None:
            search.record(algorithm.n_gen)

    return Track()


def _error_line(error: Exception) -> str:
    """One line for a failed measurement: mmtok's own errors as they are, anything else with its type."""
    text = " ".join(str(error).split()) or "(no message)"
    return text if isinstance(error, MmtokError) else f"{type(error).__name__}: {text}"


def summarise(
    spec: Spec,
    entries: list[dict[str, Any]],
    history: list[dict[str, float]],
    evaluator: CalibrationEvaluator,
    failed: list[dict[str, Any]] | None = None,
) -> Plan:
    def by_cost(e: dict[str, Any]) -> tuple[float, ...]:  # equal costs (a flat per-image rate): the better one first
        # and at equal values, the audio as it is before a cut that changed nothing (no silence long enough)
        return (
            e["objectives"]["cost"],
            *objective_vector(spec, e["objectives"]),
            bool(e["setting"].get("trim_silence")),
        )

    front = sorted(_distinct(spec, pareto_rows(spec, entries)), key=by_cost)
    feasible = [e for e in entries if e["objectives"]["tokens"] <= spec.budget_tokens]
    shortfall = None
    if not entries:
        shortfall = f"no setting could be measured ({len(failed or [])} failed)"
    elif not feasible:
        cheapest = min(entries, key=lambda e: e["objectives"]["tokens"])
        need = int(cheapest["objectives"]["tokens"])
        shortfall = (
            f"no setting fits the budget of {spec.budget_tokens:,} tokens; the smallest needs {need:,} "
            f"({need - spec.budget_tokens:,} over): {setting_key(cheapest['setting'])}"
        )
    at_bars = [e for e in feasible if meets_bars(spec, e["objectives"])]
    cheapest_at_bars = min(at_bars, key=by_cost) if at_bars else None
    if feasible and spec.bars and not at_bars:
        shortfall = shortfall or "no feasible setting meets every bar: " + "; ".join(
            f"best {name} = {best_value(spec, feasible, name):.4g} vs bar {bar}" for name, bar in spec.bars.items()
        )
    knee = None
    if len(front) >= 3:
        from pymoo.mcdm.high_tradeoff import HighTradeoffPoints

        matrix = np.array([objective_vector(spec, e["objectives"]) for e in front])
        span = np.maximum(matrix.max(0) - matrix.min(0), 1e-12)
        points = HighTradeoffPoints().do((matrix - matrix.min(0)) / span)
        if points is not None and len(points):
            knee = front[int(points[0])]
    elif front:
        knee = front[len(front) // 2]
    return Plan(
        spec,
        front,
        entries,
        history,
        knee,
        cheapest_at_bars,
        shortfall,
        evaluator.evaluations,
        evaluator.measurements,
        failed=failed or [],
    )


def best_value(spec: Spec, entries: list[dict[str, Any]], name: str) -> float:
    values = [e["objectives"][name] for e in entries if not math.isnan(e["objectives"].get(name, float("nan")))]
    return (min if OBJECTIVES[name] == "min" else max)(values)


def grid(spec: Spec) -> list[dict[str, Any]]:
    """Every distinct setting of a spec whose knobs are all discrete (for the exhaustive comparison)."""
    choices = {}
    for knob, var in domains(spec).items():
        if not hasattr(var, "options"):
            raise EvalError(f"knob {knob} is continuous: the grid needs discrete options")
        choices[knob] = list(var.options)
    settings: dict[str, dict[str, Any]] = {}
    for combo in itertools.product(*choices.values()):
        setting = resolve_setting(spec, dict(zip(choices, combo, strict=True)))
        settings.setdefault(setting_key(setting), setting)
    return list(settings.values())
