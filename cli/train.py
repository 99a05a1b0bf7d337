"""``mmtok train``: the commands that trained every shipped model.

Exit codes: 0 when the model was saved, 2 for a config that cannot be used (missing, malformed, wrong keys) or a
bad option, 1 when training itself failed.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from mmtok.cli.common import check_device, flushes_json_lines, print_error, print_json_line, say
from mmtok.errors import ConfigError, MmtokError

train_app = typer.Typer(
    help="Train mmtok's models (the shipped weights were made by these commands).", no_args_is_help=True
)

JSON_HELP = "Print one JSON object: the folder the model was saved to."


def _command() -> str:
    return "mmtok " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _train(config: Path, run: Callable[[], Any], json_out: bool) -> None:
    """Run a trainer; its errors are one line (a config error is a usage error), its folder is reported. An empty
    config is refused: it would train every default into the default folder."""
    from mmtok.files import read_toml

    try:
        if not read_toml(config, "training config"):
            raise ConfigError(f"{config}: training config is empty (give at least the [train] section's out)")
        folder = run()
    except ConfigError as e:
        print_error(e)
        raise typer.Exit(2) from None
    except MmtokError as e:
        print_error(e)
        raise typer.Exit(1) from None
    except ValueError as e:  # a trainer refusing a setting it cannot train with
        print_error(e)
        raise typer.Exit(2) from None
    except OSError as e:
        print_error(f"{e.filename or 'training'}: {e.strerror or e}")
        raise typer.Exit(1) from None
    if folder is None:  # a torchrun rank other than 0: rank 0 saves and reports
        return
    if json_out:
        print_json_line({"saved": str(folder)})
    else:
        say(f"saved {folder}")


@train_app.command("clip")
@flushes_json_lines
def train_clip_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/clip-tiny.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    resume: bool = typer.Option(False, help="Continue from the output folder's train_state.safetensors."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train the small CLIP teacher on offline captioned photos and digits."""
    from mmtok.models.train_clip import train_clip

    check_device(device)
    _train(
        config,
        lambda: train_clip(config, out=out, steps=steps, resume=resume, device=device, command=_command()),
        json_out,
    )


@train_app.command("vq")
@flushes_json_lines
def train_vq_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/vq-clip-tiny.toml."),
    teacher: str | None = typer.Option(None, help="Teacher: registry name, folder, open_clip:ARCH/TAG or hf-hub:ID."),
    data: str | None = typer.Option(None, help="Image folder or .jsonl manifest (default: offline photos+digits)."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    resume: bool = typer.Option(False, help="Continue from the output folder's train_state.safetensors."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train the CLIP-aligned VQ tokenizer (single process, or several with torchrun)."""
    from mmtok.models.train_vq import train_vq

    check_device(device)
    _train(
        config,
        lambda: train_vq(
            config, out=out, steps=steps, teacher=teacher, data=data, resume=resume, device=device, command=_command()
        ),
        json_out,
    )


@train_app.command("av")
@flushes_json_lines
def train_av_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/av-tiny.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train the shared audio/video embedder on the shipped speech and generated videos."""
    from mmtok.models.train_av import train_av

    check_device(device)
    _train(config, lambda: train_av(config, out=out, steps=steps, device=device, command=_command()), json_out)


@train_app.command("backbone")
@flushes_json_lines
def train_backbone_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/backbone-tiny.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train the MoE backbone on the digits-on-photos task (needs the image tokenizer)."""
    from mmtok.models.train_backbone import train_backbone

    check_device(device)
    _train(config, lambda: train_backbone(config, out=out, steps=steps, device=device, command=_command()), json_out)


@train_app.command("critic")
@flushes_json_lines
def train_critic_cmd(
    config: Path = typer.Argument(..., help="Training config (TOML), e.g. models/configs/train/critic-vq-text.toml."),
    out: str | None = typer.Option(None, help="Output folder (overrides the config's)."),
    steps: int | None = typer.Option(None, min=1, help="Training steps (overrides the config's)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train the token-relevance critic (pmi between visual tokens and text) used by MI truncation."""
    from mmtok.models.train_critic import train_critic

    _train(config, lambda: train_critic(config, out=out, steps=steps, command=_command()), json_out)
