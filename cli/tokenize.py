"""``mmtok tokenize`` and ``mmtok detokenize``."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import (
    MIN_PROGRESS_ITEMS,
    about,
    check_device,
    check_out_file,
    check_out_folder,
    flushes_json_lines,
    max_pixels_option,
    print_error,
    print_json_line,
    print_note,
    progress_bar,
    resolve_max_pixels,
    say,
    stderr_is_terminal,
)
from mmtok.errors import CheckpointError, ConfigError, MediaError, MmtokError
from mmtok.media.types import warnings_naming

DEFAULT_IMAGE_TOKENIZER = "vq-clip-tiny"
DEFAULT_AV_TOKENIZER = "av-tiny"
FLAGS = {"image": "--tokenizer", "av": "--av-tokenizer"}


class _Tokenizers:
    """Loads each tokenizer on first use, on the requested device; one that cannot be loaded is a usage error
    naming its flag."""

    def __init__(self, image: str, av: str, device: str) -> None:
        self.names = {"image": image, "av": av}
        self.device = device
        self.loaded: dict[str, Any] = {}
        self.av_levels: int | None = None  # residual codebook levels kept for audio/video

    def get(self, which: str) -> Any:
        if which not in self.loaded:
            import mmtok
            from mmtok.models.training import select_device

            try:
                device = select_device(self.device)
            except ConfigError as e:
                raise typer.BadParameter(str(e).removeprefix("--device "), param_hint="--device") from None
            try:
                tok = mmtok.get_tokenizer(self.names[which])
            except (ConfigError, CheckpointError) as e:
                raise typer.BadParameter(str(e), param_hint=FLAGS[which]) from None
            if not _tokenizes(tok, which):
                kind = "an audio/video" if which == "av" else "an image"
                raise typer.BadParameter(
                    f"{self.names[which]} tokenizes {getattr(tok, 'modality', 'something else')}: this option needs "
                    f"{kind} tokenizer",
                    param_hint=FLAGS[which],
                )
            self.loaded[which] = tok.to(device).eval()
        return self.loaded[which]


def _tokenizes(tok: Any, which: str) -> bool:
    """Whether ``tok`` does the --tokenizer (images) or --av-tokenizer (audio and video) job."""
    if which == "av":
        return callable(getattr(tok, "encode_streams", None))
    return getattr(tok, "modality", None) == "image" and callable(getattr(tok, "encode_batch", None))


class _PixelLimited:
    """The image tokenizer as the folder pipeline uses it, reading each image with the --max-pixels limit."""

    def __init__(self, tokenizer: Any, max_pixels: int) -> None:
        self.tokenizer = tokenizer
        self.max_pixels = max_pixels

    def preprocess(self, path: Path, image_size: int | None) -> Any:
        import mmtok

        return self.tokenizer.preprocess(mmtok.load(path, kind="image", max_pixels=self.max_pixels), image_size)

    def encode_batch(self, x: Any) -> Any:
        return self.tokenizer.encode_batch(x)

    def sequence(self, ids: Any, meta: dict[str, Any]) -> Any:
        return self.tokenizer.sequence(ids, meta)


@flushes_json_lines
def tokenize(
    paths: list[Path] = typer.Argument(..., help="Image, audio, video or PDF files, or folders (walked recursively)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder."),
    tokenizer: str = typer.Option(DEFAULT_IMAGE_TOKENIZER, help="Image tokenizer: name, config path or folder."),
    av_tokenizer: str = typer.Option(DEFAULT_AV_TOKENIZER, help="Audio/video tokenizer."),
    image_size: int | None = typer.Option(
        None, help="Image side in px, a multiple of the tokenizer's downsampling (8): (side/8)^2 tokens."
    ),
    tokens_per_second: float | None = typer.Option(None, help="Audio/video token rate (default: the tokenizer's)."),
    continuous: bool = typer.Option(False, help="Audio/video: keep continuous embeddings, no codebook ids."),
    codebook_levels: int | None = typer.Option(None, min=1, help="Audio/video: residual codebook levels kept."),
    batch_size: int = typer.Option(32, min=1, help="Images per forward pass (folders)."),
    workers: int = typer.Option(2, min=0, help="DataLoader processes decoding images (folders)."),
    shard_size: int = typer.Option(1024, min=1, help="Sequences per shard file (folders)."),
    resume: bool = typer.Option(False, help="Skip images already in the output shards."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
    json_out: bool = typer.Option(False, "--json", help="Print token counts and ids, one JSON object per stream."),
    truncate: str | None = typer.Option(
        None, help="Truncate the tokens: mi (image tokens), or random, uniform, norm, divprune, tome (any tokens)."
    ),
    context: str | None = typer.Option(None, help="Context for --truncate mi (text)."),
    threshold: float | None = typer.Option(
        None, help="--truncate mi threshold in nats (default -0.15, calibrated; the design seed's is 0.18)."
    ),
    keep_ratio: float | None = typer.Option(None, help="--truncate budget: fraction of tokens kept."),
    max_pixels: int | None = max_pixels_option(),
) -> None:
    """Media -> token sequences. Images: one .safetensors per file, shards per folder. Audio and video: one file
    per input holding a sequence per stream (a video with sound gives time-aligned "video" and "audio").

    Outputs keep each input's path relative to the folder the inputs share (a/photo.jpg -> a/photo.safetensors);
    two inputs that would still share a name keep their full names (photo.jpg.safetensors), so none is
    overwritten. --truncate applies to every stream; a method that does not apply to a stream's tokens (mi on
    audio) is that input's error."""
    check_device(device)
    _check_rate(tokens_per_second)
    check_out_folder(out)
    shorten = _shortener(truncate, threshold, keep_ratio, context)
    limit = resolve_max_pixels(max_pixels)
    toks = _Tokenizers(tokenizer, av_tokenizer, device)
    toks.av_levels = codebook_levels
    _check_image_size(toks, image_size)
    folder_options = {"batch_size": batch_size, "workers": workers, "shard_size": shard_size, "resume": resume}
    run = _Run(toks, limit, image_size, tokens_per_second, continuous, json_out, shorten, folder_options)
    plan = _plan(paths, out, limit)
    total = sum(len(e.images) if isinstance(e, _Folder) else 1 for e in plan if not isinstance(e, MmtokError))
    failures = 0
    # A line printed on the terminal under a live bar lands on the bar's own line: held until the bar is gone.
    run.held = [] if _stdout_is_terminal() and stderr_is_terminal() and total >= MIN_PROGRESS_ITEMS else None
    with progress_bar(total, "tokenizing") as advance:
        for entry in plan:
            failures += run.guarded(entry, advance)
    for line in run.held or ():
        say(line)
    if failures:
        raise typer.Exit(1)


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _shortener(method: str | None, threshold: float | None, keep_ratio: float | None, context: str | None) -> Any:
    """``--truncate``'s method as a function of a token sequence (the identity without one); a context that cannot
    be read is a usage error."""
    from mmtok.cli.truncate import apply_truncation, load_context, truncation_options

    options = truncation_options(method, threshold, None, keep_ratio, context, method_flag="--truncate")
    try:
        context_value = load_context(context)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None
    warned: set[str] = set()

    def shorten(seq: Any) -> Any:
        return apply_truncation(seq, options, context_value, warned) if options else seq

    return shorten


@dataclass
class _Run:
    """One ``mmtok tokenize`` call's settings, applied to each planned input in turn."""

    toks: Any
    max_pixels: int
    image_size: int | None
    tokens_per_second: float | None
    continuous: bool
    json_out: bool
    shorten: Any  # TokenSequence -> TokenSequence (the --truncate method, or none)
    folder_options: dict[str, Any]  # tokenize_folder's batch_size, workers, shard_size, resume
    held: list[str] | None = None  # stdout lines held while a progress bar is drawn (None: printed at once)

    def say(self, line: str) -> None:
        if self.held is None:
            say(line)
        else:
            self.held.append(line)

    def guarded(self, entry: Any, advance: Any) -> int:
        """:meth:`entry`, with this input's error as its one line (the batch goes on); how many of it failed."""
        try:
            return self.entry(entry, advance)
        except MmtokError as e:
            print_error(about(getattr(entry, "path", ""), e))  # a planned error (no path) as it is
        except typer.BadParameter:  # a tokenizer of the wrong kind, found on first use: a usage error
            raise
        except Exception as e:  # a bug on this input
            print_error(about(getattr(entry, "path", ""), f"unexpected {type(e).__name__}: {e}"))
        return 1

    def entry(self, entry: Any, advance: Any) -> int:
        """Tokenize one planned input (raising its MmtokError); returns how many of its images failed."""
        from mmtok.pipeline import tokenize_folder

        if isinstance(entry, MmtokError):
            raise entry
        if isinstance(entry, _File):
            try:
                with warnings_naming(entry.path):
                    _tokenize_file(
                        entry, self.toks, self.image_size, self.tokens_per_second, self.continuous, self.json_out,
                        self.shorten, self.say,
                    )  # fmt: skip
            except OSError as e:  # the output could not be written: this input's error, the batch goes on
                raise MmtokError(f"{entry.path}: cannot write {entry.target}: {e.strerror or e}") from None
            advance(1)
            return 0
        tokenizer = _PixelLimited(self.toks.get("image"), self.max_pixels)
        counted = [0]

        def step(n: int) -> None:
            counted[0] += n
            advance(n)

        try:
            report = tokenize_folder(
                entry.images,
                tokenizer,
                entry.target,
                **self.folder_options,
                image_size=self.image_size,
                on_error=print_error,
                progress=step,
                postprocess=self.shorten,
            )
        except OSError as e:
            raise MmtokError(f"{entry.target}: cannot write the shards: {e.strerror or e}") from None
        advance(len(entry.images) - counted[0])  # those already done (--resume) or unreadable: handled too
        _report_folder(entry, report, self.json_out, self.say)
        return len(report.failed)


def _check_rate(tokens_per_second: float | None) -> None:
    if tokens_per_second is not None and not tokens_per_second > 0:  # NaN too
        raise typer.BadParameter(f"must be above 0, got {tokens_per_second:g}", param_hint="--tokens-per-second")


def _check_image_size(toks: Any, image_size: int | None) -> None:
    if image_size is not None:
        from mmtok.models.vq import VQ_LIMITS

        step, largest = toks.get("image").config.downsample, VQ_LIMITS["image_size"][1]
        if image_size < step or image_size % step or image_size > largest:
            raise typer.BadParameter(
                f"must be a multiple of {step} (the tokenizer's downsampling) from {step} to {largest}, got "
                f"{image_size}",
                param_hint="--image-size",
            )


def _report_folder(entry: Any, report: Any, json_out: bool, say: Any = say) -> None:
    if json_out:
        _print_shards(report.shards)
        return
    skipped = f", {report.skipped:,} already done" if report.skipped else ""
    say(
        f"{entry.path}: {report.done:,} images -> {len(report.shards)} shard(s) in {entry.target} "
        f"({report.images_per_second:,.1f} images/s{skipped})"
    )


@dataclass(frozen=True)
class _Folder:
    """A folder's images, tokenized in batches into shards in ``target``."""

    path: Path
    images: list[Path]
    target: Path


@dataclass(frozen=True)
class _File:
    """One image, audio or video file, tokenized into its own token file ``target``."""

    path: Path
    media: Any
    target: Path


_SHARD_NAME = re.compile(r"shard-r\d+-\d+", re.IGNORECASE)


def _plan(paths: list[Path], out: Path, max_pixels: int) -> list[_Folder | _File | MmtokError]:
    """What each input becomes, in input order, with every output name fixed before anything is written.

    An output keeps its input's path relative to the folder the inputs have in common (a folder given as an input
    keeps its own name): ``a/photo.jpg`` and ``b/photo.webp`` give ``a/photo.safetensors`` and
    ``b/photo.safetensors``. Inputs that would still share a name (``photo.jpg`` and ``photo.png`` side by side,
    compared ignoring case) are named in full instead (``photo.jpg.safetensors``), and so is a file whose name
    could be taken for one of a folder's shards. A file given twice, directly or inside a folder, is tokenized
    once. So no output is written twice in a run. Inputs that do not exist take no part in the common folder: a
    mistyped path does not move the others' outputs.
    """
    anchors = [Path(os.path.abspath(p)).parent for p in paths if os.path.lexists(p)]
    common = Path(os.path.commonpath(anchors)) if anchors else Path.cwd()
    entries: list[_Folder | _File | MmtokError | None] = []  # None: a file, named once all names are known
    files: list[tuple[int, Path, Any, Path]] = []  # (position in entries, input, its media, output folder)
    seen: set[Path] = set()

    def add_file(path: Path, media: Any) -> None:
        absolute = Path(os.path.abspath(path))
        if absolute in seen:
            return
        seen.add(absolute)
        files.append((len(entries), path, media, out / absolute.parent.relative_to(common)))
        entries.append(None)

    for path in paths:
        if path.is_dir():
            absolute = Path(os.path.abspath(path))
            if absolute in seen:
                continue
            seen.add(absolute)
            images, others = _split_folder(path, max_pixels)
            if not images and not others:  # only text files: nothing to do is an error, not a silent success
                entries.append(MediaError(path, "no images, audio or video to tokenize in this folder"))
            if images:
                entries.append(_Folder(path, images, out / absolute.relative_to(common)))
            for item in others:
                if isinstance(item, MediaError):
                    entries.append(item)
                else:
                    add_file(*item)
            continue
        try:
            media = _load_tokenizable(path, max_pixels)
        except MmtokError as e:
            entries.append(e)
            continue
        add_file(path, media)

    def key(folder: Path, name: str) -> tuple[Path, str]:
        return folder, name.casefold()  # case-insensitive file systems must not merge two outputs either

    stems: dict[tuple[Path, str], int] = {}
    for _, path, _, folder in files:
        stems[key(folder, path.stem)] = stems.get(key(folder, path.stem), 0) + 1
    for index, path, media, folder in files:
        shared = stems[key(folder, path.stem)] > 1 or _SHARD_NAME.fullmatch(path.stem) is not None
        entries[index] = _File(path, media, folder / f"{path.name if shared else path.stem}.safetensors")
    return [entry for entry in entries if entry is not None]


def _load_tokenizable(path: Path, max_pixels: int) -> Any:
    import mmtok

    media = mmtok.load(path, max_pixels=max_pixels)
    if media.kind not in ("image", "audio", "video", "document"):
        raise MediaError(path, f"cannot tokenize {media.kind}; give images, audio, video or PDFs")
    return media


def _split_folder(folder: Path, max_pixels: int) -> tuple[list[Path], list[tuple[Path, Any] | MediaError]]:
    """Images (batched through the folder pipeline) and everything else (audio and video with their metadata, and
    errors)."""
    import mmtok

    images: list[Path] = []
    others: list[tuple[Path, Any] | MediaError] = []
    for item in mmtok.iter_files([folder]):
        if isinstance(item, MediaError):
            others.append(item)
            continue
        try:
            media = mmtok.load(item, max_pixels=max_pixels)
        except MediaError as e:
            others.append(e)
            continue
        if media.kind == "image":
            images.append(item)
        elif media.kind in ("audio", "video", "document"):  # a PDF: one file of sequences, one a page
            others.append((item, media))  # text files in a media folder are not tokenized
    return images, others


def _tokenize_file(
    entry: _File,
    toks: _Tokenizers,
    image_size: int | None,
    rate: float | None,
    continuous: bool,
    json_out: bool,
    shorten: Any,
    say: Any = say,
) -> None:
    import mmtok

    path, media, target = entry.path, entry.media, entry.target
    if media.kind == "document":  # each page rendered, through the image tokenizer: one sequence a page
        from mmtok.media.document import page_sequences

        streams = {name: shorten(seq) for name, seq in page_sequences(media, toks.get("image"), image_size).items()}
        mmtok.save_sequences(target, streams)
    elif media.kind == "image":
        seq = shorten(toks.get("image").encode(media, image_size=image_size))
        seq.save(target)
        streams = {"image": seq}
    else:
        streams = toks.get("av").encode_streams(
            media, tokens_per_second=rate, quantize=not continuous, codebook_levels=toks.av_levels
        )
        streams = {name: shorten(seq) for name, seq in streams.items()}
        mmtok.save_sequences(target, streams)
    for name, seq in streams.items():
        if json_out:
            print_json_line(_seq_json(str(path), seq, target, name))
        else:
            shape = f"grid {seq.grid[0]}x{seq.grid[1]}" if seq.grid else f"{seq.meta.get('tokens_per_second')}/s"
            say(f"{path} [{name}]: {len(seq)} tokens, {shape} -> {target}")


def _seq_json(item: str, seq: Any, file: Path, stream: str | None = None) -> dict:
    row = {
        "item": item,
        "stream": stream or seq.modality,
        "tokens": len(seq),
        "grid": list(seq.grid) if seq.grid else None,
        "tokenizer": seq.tokenizer,
        "ids": seq.ids.tolist() if seq.ids is not None else None,
        "file": str(file),
    }
    if seq.times is not None:
        row["tokens_per_second"] = seq.meta.get("tokens_per_second")
    return row


def _print_shards(shards: list[str]) -> None:
    from mmtok.tokens import load_sequences

    for shard in shards:
        for key, seq in load_sequences(shard).items():
            print_json_line(_seq_json(key, seq, Path(shard)))


def _either(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")
TEXT_SUFFIXES = (".txt",)
OUT_SUFFIXES = {"image": IMAGE_SUFFIXES, "audio": AUDIO_SUFFIXES, "text": TEXT_SUFFIXES}


@flushes_json_lines
def detokenize(
    tokens: Path = typer.Argument(..., help="A token file written by `mmtok tokenize`."),
    out: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help=f"Output for the tokens' modality: image ({'/'.join(IMAGE_SUFFIXES)}), audio "
        f"({'/'.join(AUDIO_SUFFIXES)}), text ({'/'.join(TEXT_SUFFIXES)}).",
    ),
    key: str | None = typer.Option(None, help="Which sequence of a multi-sequence file (e.g. audio, or a path)."),
    tokenizer: str | None = typer.Option(None, help="Tokenizer (default: the one named in the token file)."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: what was written, and notes."),
) -> None:
    """Token sequence -> media, with the tokenizer that made it: image tokens to an image, audio tokens to sound,
    text tokens to text. Video tokens hold motion features only and do not decode to media.

    A reconstruction of a non-square image shows the centre square the tokens saw; a note says so."""
    from mmtok.cli.truncate import refuse_input_as_output

    check_device(device)
    check_out_file(out)
    refuse_input_as_output(out, tokens)
    try:
        count, key, seq = _decodable_sequence(tokens, key)
    except MmtokError as e:
        print_error(about(tokens, e))
        raise typer.Exit(1) from None
    wanted = OUT_SUFFIXES[seq.modality]
    if out.suffix.lower() not in wanted:
        print_error(f"--out {out}: {seq.modality} tokens decode to {seq.modality}; name a {_either(wanted)} file")
        raise typer.Exit(2)
    try:
        media = _decoded(tokens, seq, tokenizer, device)
        notes = list(getattr(media, "notes", ()))
    except MmtokError as e:
        print_error(about(tokens, e))
        raise typer.Exit(1) from None
    except (ValueError, TypeError, RuntimeError, ArithmeticError, LookupError, AssertionError) as e:  # bad values
        print_error(about(tokens, f"cannot decode: {type(e).__name__}: {e}"))
        raise typer.Exit(1) from None
    try:
        _write_media(media, out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    except (OSError, ValueError) as e:
        print_error(f"{out}: cannot write: {getattr(e, 'strerror', None) or e}")
        raise typer.Exit(1) from None
    if json_out:
        print_json_line({"tokens": str(tokens), "key": key, "modality": seq.modality, "out": str(out), "notes": notes})
        return
    say(f"{tokens}{'' if count == 1 else f'[{key}]'} -> {out}")
    for note in notes:
        print_note(note)


def _decodable_sequence(tokens: Path, key: str | None) -> tuple[int, str, Any]:
    """(how many sequences the file holds, the chosen key, its sequence); a video's token file gives its sound."""
    import mmtok
    from mmtok.cli.truncate import choose_sequence

    sequences = mmtok.load_sequences(tokens)
    if key is None and set(sequences) == {"audio", "video"}:
        key = "audio"  # a video's token file: only its sound decodes to media
    key, seq = choose_sequence(tokens, sequences, key)
    if seq.modality == "video":
        raise mmtok.TokenError(
            f"{tokens}[{key}]: video tokens hold motion features, which do not determine pixels; "
            "only image, audio and text tokens decode to media"
        )
    return len(sequences), key, seq


def _decoded(tokens: Path, seq: Any, tokenizer: str | None, device: str) -> Any:
    """``seq`` decoded by ``tokenizer`` (the user's own choice: a name, config or folder), or else by the one the
    file names (registered names only), once it is known to make the sequence's modality."""
    import mmtok
    from mmtok.models.training import select_device
    from mmtok.registry import get_registered

    if tokenizer is not None:
        tok = mmtok.get_tokenizer(tokenizer)
    else:
        tok = get_registered(seq.tokenizer, "tokenizer", f"{tokens}", mmtok.TokenError)
    _check_decodes(tok, seq)
    return tok.to(select_device(device)).eval().decode(seq)


def _check_decodes(tok: Any, seq: Any) -> None:
    """The tokenizer makes the sequence's modality (text-bytes "decoded" image tokens into raw bytes in a .png)."""
    import mmtok

    made = ("audio", "video") if getattr(tok, "modality", None) == "audio" else (getattr(tok, "modality", None),)
    if seq.modality not in made:
        raise mmtok.TokenError(
            f"{seq.modality} tokens cannot be decoded by {getattr(tok, 'name', 'this tokenizer')}, a "
            f"{made[0]} tokenizer"
        )


def _write_media(media: Any, out: Path) -> None:
    """Text, audio (soundfile, by the suffix) or an image (Pillow, by the suffix) to ``out``, atomically: through a
    temporary file renamed over ``out``, so a failed write leaves no half file and a link at ``out`` is replaced,
    never written through."""
    from mmtok.files import atomic_path, write_atomic

    if isinstance(media, str):
        write_atomic(out, media)
        return
    with atomic_path(out) as partial:
        if media.kind == "audio":
            import soundfile as sf

            try:
                sf.write(partial, media.waveform()[0].numpy(), media.sample_rate_hz, format=out.suffix[1:].upper())
            except sf.LibsndfileError as e:
                raise OSError(str(e)) from None
        else:
            import PIL.Image

            image = media.to_pil()
            image.save(partial, format=PIL.Image.registered_extensions()[out.suffix.lower()])
