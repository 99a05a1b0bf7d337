"""``mmtok train KIND CONFIG``: the commands that trained every shipped model, one per row of :data:`KINDS`.

Every kind takes ``--out``, ``--steps``, ``--resume`` and ``--json`` (and ``--device``, but the critic, which
trains on the CPU); a row adds its own options (vq: ``--teacher``, ``--data``). Each runs its trainer,
``mmtok.models.train_<kind>.train_<kind>(config, **options)`` (imported when the command runs); under
``torchrun`` rank 0 reports.

Exit codes: 0 when the model was saved, 2 for a config that cannot be used (missing, malformed, wrong keys) or a
bad option, 1 when training itself failed.
"""

from __future__ import annotations

import inspect
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Optional

import typer

from mmtok.cli.common import check_device, flushes_json_lines, print_error, print_json_line, say
from mmtok.errors import ConfigError, MmtokError

train_app = typer.Typer(
    help="Train mmtok's models (the shipped weights were made by these commands).", no_args_is_help=True
)

JSON_HELP = "Print one JSON object: the folder the model was saved to."


@dataclass(frozen=True)
class Kind:
    """One ``mmtok train`` command."""

    name: str  # the command; its trainer is TRAINERS[name]
    help: str
    example: str  # the config the help names, in models/configs/train/
    device: bool = True  # has --device
    extra: tuple[tuple[str, str], ...] = ()  # (option, help) of its own text options, before the common ones


# mmtok.models.train_<kind>.train_<kind>, imported when its command runs (a trainer imports torch)
TRAINERS: dict[str, Callable[[], Callable[..., Path | None]]] = {
    "clip": lambda: import_module("mmtok.models.train_clip").train_clip,
    "vq": lambda: import_module("mmtok.models.train_vq").train_vq,
    "av": lambda: import_module("mmtok.models.train_av").train_av,
    "backbone": lambda: import_module("mmtok.models.train_backbone").train_backbone,
    "critic": lambda: import_module("mmtok.models.train_critic").train_critic,
}
VQ_OPTIONS = (
    ("teacher", "Teacher: registry name, folder, open_clip:ARCH/TAG or hf-hub:ID."),
    ("data", "Image folder or .jsonl manifest (default: offline photos+digits)."),
)
KINDS = (
    Kind("clip", "Train the small CLIP teacher on offline captioned photos and digits.", "clip-tiny.toml"),
    Kind(
        "vq",
        "Train the CLIP-aligned VQ tokenizer (single process, or several with torchrun).",
        "vq-clip-tiny.toml",
        extra=VQ_OPTIONS,
    ),
    Kind("av", "Train the shared audio/video embedder on the shipped speech and generated videos.", "av-tiny.toml"),
    Kind(
        "backbone",
        "Train the MoE backbone on the digits-on-photos task (needs the image tokenizer).",
        "backbone-tiny.toml",
    ),
    Kind(
        "critic",
        "Train the token-relevance critic (pmi between visual tokens and text) used by MI truncation.",
        "critic-vq-text.toml",
        device=False,
    ),
)


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
    if folder is not None:  # None: a torchrun rank other than 0 (rank 0 saves and reports)
        if json_out:
            print_json_line({"saved": str(folder)})
        else:
            say(f"saved {folder}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # The process group is closed and everything is written. Skip interpreter finalisation: gloo's worker
        # threads can abort a finished process there (SIGABRT, "terminate called without an active exception").
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _parameters(kind: Kind) -> list[inspect.Parameter]:
    """The command's options, in the order its help lists them."""

    def option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)

    config_help = f"Training config (TOML), e.g. models/configs/train/{kind.example}."
    params = [option("config", Path, typer.Argument(..., help=config_help))]
    params += [option(name, Optional[str], typer.Option(None, help=text)) for name, text in kind.extra]  # noqa: UP045
    params += [
        option("out", Optional[str], typer.Option(None, help="Output folder (overrides the config's).")),  # noqa: UP045
        option(
            "steps",
            Optional[int],  # noqa: UP045
            typer.Option(None, min=1, help="Training steps (overrides the config's)."),
        ),
        option("resume", bool, typer.Option(False, help="Continue from the output folder's train_state.safetensors.")),
    ]
    if kind.device:
        params.append(option("device", str, typer.Option("auto", help="cpu, cuda, or auto.")))
    params.append(option("json_out", bool, typer.Option(False, "--json", help=JSON_HELP)))
    return params


def _register(kind: Kind) -> None:
    def command(**options: Any) -> None:
        config: Path = options.pop("config")
        json_out: bool = options.pop("json_out")
        if kind.device:
            check_device(options["device"])
        trainer = TRAINERS[kind.name]()
        _train(config, lambda: trainer(config, command=_command(), **options), json_out)

    command.__name__ = f"train_{kind.name}_cmd"
    command.__doc__ = kind.help
    command.__signature__ = inspect.Signature(_parameters(kind))  # type: ignore[attr-defined]
    train_app.command(kind.name)(flushes_json_lines(command))


for _kind in KINDS:
    _register(_kind)
