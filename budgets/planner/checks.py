"""What a spec asks must be measurable: objectives, bars, models and the media they take, knobs that apply,
backends that load, and the user's calibration photos and recordings."""

from __future__ import annotations

import os
from pathlib import Path

from mmtok.budgets.planner.spec import AUDIO_KNOBS, BREAKPOINTS, OBJECTIVES, SELF_HOSTED, Spec, candidate_models
from mmtok.budgets.planner.variables import _options, image_sizes
from mmtok.errors import ConfigError, EvalError, MmtokError


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
    from mmtok.files import parse_json, read_text, text_lines

    where = f"{spec.path or spec.name}: [calibration] speech_manifest"
    manifest = spec.speech_manifest
    if manifest is None or not manifest.is_file():
        raise ConfigError(f"{where} {manifest}: no such file")
    items: list[tuple[Path, str]] = []
    for number, line in enumerate(text_lines(read_text(manifest, "speech manifest")), 1):
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
