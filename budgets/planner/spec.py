"""A planning spec: its dataclass, the TOML reader that checks every key and value, and the constants of
its knobs and objectives."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmtok.errors import ConfigError
from mmtok.files import UNPRINTABLE, read_toml

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
# Every size a spec sets is capped, checked when it is read (before any model loads or any setting is measured):
MAX_AUDIO_SECONDS = 4 * 3600.0  # [request] audio_seconds
MAX_REQUEST_TOKENS = 10_000_000  # [request] text_tokens, output_tokens and budget_tokens
MAX_CALIBRATION_PHOTOS = 2_048  # [calibration] photos (FD on each setting's renditions of them)
MAX_CALIBRATION_SPEECH = 1_000  # [calibration] speech (each recording transcribed per setting)
MAX_CALIBRATION_QA = 10_000  # [calibration] qa
MAX_POPULATION = 1_000  # [search] population (and --population)
MAX_GENERATIONS = 1_000  # [search] generations (and --generations)
MAX_EVALUATIONS = 100_000  # population x generations: the settings NSGA-II may ask to be measured
MAX_OPTIONS = 256  # options listed for one knob
MAX_SEED = 2**32 - 1


def check_search_size(population: int, generations: int, where: str) -> None:
    """NSGA-II's population and generations within their caps, the product within ``MAX_EVALUATIONS``."""
    if not 4 <= population <= MAX_POPULATION:
        raise ConfigError(f"{where} population must be an integer from 4 to {MAX_POPULATION:,}, got {population!r}")
    if not 1 <= generations <= MAX_GENERATIONS:
        raise ConfigError(f"{where} generations must be from 1 to {MAX_GENERATIONS:,}, got {generations!r}")
    if population * generations > MAX_EVALUATIONS:
        raise ConfigError(
            f"{where} population x generations = {population * generations:,} evaluations, over the limit of "
            f"{MAX_EVALUATIONS:,}"
        )


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
        audio_seconds=read.number("request", "audio_seconds", 20.0, minimum=0, maximum=MAX_AUDIO_SECONDS),
        text_tokens=read.integer("request", "text_tokens", 200, minimum=0, maximum=MAX_REQUEST_TOKENS),
        output_tokens=read.integer("request", "output_tokens", 200, minimum=0, maximum=MAX_REQUEST_TOKENS),
        budget_tokens=read.integer("request", "budget_tokens", 10_000, minimum=1, maximum=MAX_REQUEST_TOKENS),
        variables={knob: read.knob(knob, variables[knob]) for knob in KNOBS if knob in variables},
        minimize=read.names("objectives", "minimize", ["cost", "fd", "wer"]),
        maximize=read.names("objectives", "maximize", []),
        bars={name: read.number("bars", name, 0.0) for name in data.get("bars", {})},
        calibration_photos=read.integer("calibration", "photos", 64, minimum=2, maximum=MAX_CALIBRATION_PHOTOS),
        calibration_speech=read.integer("calibration", "speech", 12, minimum=1, maximum=MAX_CALIBRATION_SPEECH),
        calibration_qa=read.integer("calibration", "qa", 100, minimum=1, maximum=MAX_CALIBRATION_QA),
        photos_folder=read.relative_path("calibration", "photos_folder"),
        speech_manifest=read.relative_path("calibration", "speech_manifest"),
        fd_extractor=read.string("calibration", "fd_extractor", "efficientnet-lite0"),
        asr=read.string("calibration", "asr", "whisper"),
        judge=data.get("calibration", {}).get("judge", "local"),
        min_silence_s=read.optional_number("calibration", "min_silence_s", minimum=0.1),
        population=read.integer("search", "population", 24, minimum=4, maximum=MAX_POPULATION),
        generations=read.integer("search", "generations", 10, minimum=1, maximum=MAX_GENERATIONS),
        seed=read.integer("search", "seed", 1, minimum=0, maximum=MAX_SEED),
        prices=tuple(Path(p) for p in prices),
    )
    check_search_size(spec.population, spec.generations, f"{path}: [search]")
    from mmtok.budgets.planner.checks import validate  # checks reads the spec's constants: imported here

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

    def integer(self, section: str | None, key: str, default: int, minimum: int, maximum: int) -> int:
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
        """A name: non-empty, on one line, at most 200 characters, no control or direction-changing characters (it
        is printed in messages, tables and reports)."""
        value = self._raw(section, key, default)
        if not isinstance(value, str) or not value or len(value) > 200 or UNPRINTABLE.search(value):
            raise ConfigError(
                f"{self._where(section, key)} must be a name: 1 to 200 characters on one line, without control or "
                f"direction-changing characters, got {value!r:.80}"
            )
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
        if len(options) > MAX_OPTIONS:
            raise ConfigError(f"{where} lists {len(options):,} options; at most {MAX_OPTIONS}")
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


def candidate_models(spec: Spec) -> list[str]:
    models = spec.variables.get("model", [SELF_HOSTED])
    return models if isinstance(models, list) else [models]
