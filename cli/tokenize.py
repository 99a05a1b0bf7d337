"""``mmtok tokenize`` and ``mmtok detokenize``."""

from __future__ import annotations

from pathlib import Path

import typer

from mmtok.cli.common import console, flushes_json_lines, print_error, print_json_line
from mmtok.errors import MmtokError

DEFAULT_IMAGE_TOKENIZER = "vq-clip-tiny"


@flushes_json_lines
def tokenize(
    paths: list[Path] = typer.Argument(..., help="Image files or folders (walked recursively)."),
    out: Path = typer.Option(Path("tokens"), "--out", "-o", help="Output folder."),
    tokenizer: str = typer.Option(DEFAULT_IMAGE_TOKENIZER, help="Tokenizer name, config path or folder."),
    image_size: int | None = typer.Option(None, help="Input side in px (multiple of 8): (side/8)^2 tokens."),
    batch_size: int = typer.Option(32, min=1, help="Images per forward pass."),
    workers: int = typer.Option(2, min=0, help="DataLoader processes decoding images."),
    shard_size: int = typer.Option(1024, min=1, help="Sequences per shard file (folders)."),
    resume: bool = typer.Option(False, help="Skip images already in the output shards."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
    json_out: bool = typer.Option(False, "--json", help="Print token counts and ids, one JSON object per image."),
) -> None:
    """Images -> token sequences: one .safetensors per file argument, shards for each folder argument."""
    import mmtok
    from mmtok.models.training import select_device
    from mmtok.pipeline import tokenize_folder

    try:
        tok = mmtok.get_tokenizer(tokenizer).to(select_device(device)).eval()
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(2) from None
    failures = 0
    done = 0
    for path in paths:
        if path.is_dir():
            target = out / path.resolve().name
            report = tokenize_folder(
                [path],
                tok,
                target,
                batch_size=batch_size,
                workers=workers,
                shard_size=shard_size,
                resume=resume,
                image_size=image_size,
                on_error=print_error,
            )
            failures += len(report.failed)
            done += report.done
            if json_out:
                _print_shards(report.shards)
            else:
                console().print(
                    f"{path}: {report.done:,} images -> {len(report.shards)} shard(s) in {target} "
                    f"({report.images_per_second:,.1f} images/s"
                    + (f", {report.skipped:,} already done" if report.skipped else "")
                    + ")"
                )
            continue
        try:
            seq = tok.encode(mmtok.load(path, kind="image"), image_size=image_size)
        except MmtokError as e:
            failures += 1
            print_error(e)
            continue
        target = out / f"{path.stem}.safetensors"
        seq.save(target)
        done += 1
        if json_out:
            print_json_line(_seq_json(str(path), seq, target))
        else:
            console().print(f"{path}: {len(seq)} tokens, grid {seq.grid[0]}x{seq.grid[1]} -> {target}")
    if failures:
        raise typer.Exit(1)


def _seq_json(item: str, seq, file: Path) -> dict:
    return {
        "item": item,
        "tokens": len(seq),
        "grid": list(seq.grid) if seq.grid else None,
        "tokenizer": seq.tokenizer,
        "ids": seq.ids.tolist() if seq.ids is not None else None,
        "file": str(file),
    }


def _print_shards(shards: list[str]) -> None:
    from mmtok.tokens import load_sequences

    for shard in shards:
        for key, seq in load_sequences(shard).items():
            print_json_line(_seq_json(key, seq, Path(shard)))


def detokenize(
    tokens: Path = typer.Argument(..., help="A token file written by `mmtok tokenize`."),
    out: Path = typer.Option(..., "--out", "-o", help="Output file (image: .png/.jpg/.webp)."),
    key: str | None = typer.Option(None, help="Which sequence of a shard (default: the only one)."),
    tokenizer: str | None = typer.Option(None, help="Tokenizer (default: the one named in the token file)."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
) -> None:
    """Token sequence -> media, with the tokenizer that made it."""
    import mmtok
    from mmtok.models.training import select_device

    try:
        sequences = mmtok.load_sequences(tokens)
        if key is None and len(sequences) != 1:
            raise mmtok.TokenError(f"{tokens}: holds {len(sequences)} sequences; choose one with --key")
        if key is not None and key not in sequences:
            raise mmtok.TokenError(f"{tokens}: no sequence {key!r}")
        seq = sequences[key] if key is not None else next(iter(sequences.values()))
        tok = mmtok.get_tokenizer(tokenizer or seq.tokenizer).to(select_device(device)).eval()
        media = tok.decode(seq)
        out.parent.mkdir(parents=True, exist_ok=True)
        media.to_pil().save(out)
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    except (OSError, ValueError) as e:
        print_error(f"{out}: cannot write: {e}")
        raise typer.Exit(1) from None
    console().print(f"{tokens} -> {out}")
