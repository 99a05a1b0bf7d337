"""``mmtok train``: the commands that trained every shipped model."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from mmtok.cli.common import print_error
from mmtok.errors import MmtokError

train_app = typer.Typer(
    help="Train mmtok's models (the shipped weights were made by these commands).", no_args_is_help=True
)


def _command() -> str:
    return "mmtok " + " ".join(shlex.quote(a) for a in sys.argv[1:])


@train_app.command("clip")
def train_clip_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/clip-tiny.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    resume: bool = typer.Option(False, help="Continue from the output folder's train_state.safetensors."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
) -> None:
    """Train the small CLIP teacher on offline captioned photos and digits."""
    from mmtok.models.train_clip import train_clip

    try:
        folder = train_clip(config, out=out, steps=steps, resume=resume, device=device, command=_command())
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    if folder is not None:
        typer.echo(f"saved {folder}")


@train_app.command("vq")
def train_vq_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/vq-clip-tiny.toml."),
    teacher: str | None = typer.Option(None, help="Teacher: registry name, folder, open_clip:ARCH/TAG or hf-hub:ID."),
    data: str | None = typer.Option(None, help="Image folder or .jsonl manifest (default: offline photos+digits)."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    resume: bool = typer.Option(False, help="Continue from the output folder's train_state.safetensors."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
) -> None:
    """Train the CLIP-aligned VQ tokenizer (single process, or several with torchrun)."""
    from mmtok.models.train_vq import train_vq

    try:
        folder = train_vq(
            config, out=out, steps=steps, teacher=teacher, data=data, resume=resume, device=device, command=_command()
        )
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    if folder is not None:
        typer.echo(f"saved {folder}")


@train_app.command("av")
def train_av_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/av-tiny.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
) -> None:
    """Train the shared audio/video embedder on the shipped speech and generated videos."""
    from mmtok.models.train_av import train_av

    try:
        folder = train_av(config, out=out, steps=steps, device=device, command=_command())
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    typer.echo(f"saved {folder}")


@train_app.command("backbone")
def train_backbone_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/backbone-tiny.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
) -> None:
    """Train the MoE backbone on the digits-on-photos task (needs the image tokenizer)."""
    from mmtok.models.train_backbone import train_backbone

    try:
        folder = train_backbone(config, out=out, steps=steps, device=device, command=_command())
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    typer.echo(f"saved {folder}")


@train_app.command("critic")
def train_critic_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/critic-vq-text.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
) -> None:
    """Train the token-relevance critic (pmi between visual tokens and text) used by MI truncation."""
    from mmtok.models.train_critic import train_critic

    try:
        folder = train_critic(config, out=out, steps=steps, command=_command())
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    typer.echo(f"saved {folder}")
