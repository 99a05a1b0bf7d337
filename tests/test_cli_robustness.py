"""Every command, found from the Typer app (a new command is covered without editing this file), driven with bad
options and bad files: the exit code is 1 (an input failed) or 2 (a usage error), nothing is raised past the
command, and no traceback is printed. Then the option values the issue named, each exit code and message pinned,
and every command's --json (and --csv for tables)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
import torch
import typer
from typer.testing import CliRunner

from mmtok.cli.main import app
from mmtok.tokens import TokenSequence, save_sequences

runner = CliRunner()
pytestmark = pytest.mark.timeout(300)  # a command that waits (a server, stdin) fails here instead of hanging the run


def leaf_commands() -> list[tuple[list[str], click.Command]]:
    def walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
        if isinstance(command, click.Group):
            return [leaf for name, sub in sorted(command.commands.items()) for leaf in walk(sub, [*path, name])]
        return [(path, command)]

    return walk(typer.main.get_command(app), [])


COMMANDS = leaf_commands()


def cases(keep=lambda command: True) -> list:
    return [pytest.param(path, command, id=" ".join(path)) for path, command in COMMANDS if keep(command)]


REQUIRED_VALUES = {"model": "gpt-4o"}  # required options other than --out, given a value that is not the point
# Known gaps in commands this suite does not own, left out here (each would run for a minute and exit 0):
KNOWN_GAPS: dict[tuple[str, str], str] = {  # (command, bad file) -> why it is a good input there
    ("mcp", "folder"): "a folder is a good --root: the server starts, and ends at the end of stdin (exit 0)",
    ("mcp", "empty"): "an empty --config is a good (empty) settings file: the server starts, as above",
    ("mcp", "empty_tokens"): "the same: an empty file, whatever its name, is an empty settings file",
}


def _ok(result, codes=(1, 2)) -> None:
    """Exit code in ``codes``; no exception escaped the command (CliRunner would catch it, exit code 1) and no
    traceback was printed."""
    assert result.exit_code in codes, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def bad(tmp_path_factory, samples) -> dict[str, Path]:
    """Files nothing can read: empty, cut short, a folder, a FIFO, text named .jpg, token files that are not."""
    root = tmp_path_factory.mktemp("bad")
    jpeg = (samples / "chelsea.jpg").read_bytes()
    files = {
        "empty": root / "empty.jpg",
        "truncated": root / "truncated.jpg",
        "folder": root / "folder",
        "fifo": root / "fifo.jpg",
        "text": root / "text.jpg",
        "empty_tokens": root / "empty.safetensors",
        "truncated_tokens": root / "truncated.safetensors",
        "bad_header": root / "header.safetensors",
    }
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(jpeg[: len(jpeg) // 3])
    files["folder"].mkdir()
    (files["folder"] / "inner.jpg").write_text("not an image\n")
    os.mkfifo(files["fifo"])
    files["text"].write_text("hello world\n")
    files["empty_tokens"].write_bytes(b"")
    good = TokenSequence("image", ids=torch.zeros(64, dtype=torch.long), grid=(8, 8), tokenizer="vq-clip-tiny")
    data = good.save(root / "good.safetensors").read_bytes()
    files["truncated_tokens"].write_bytes(data[: len(data) // 2])
    from safetensors.torch import save_file

    save_file({"ids": torch.zeros(4, dtype=torch.long)}, str(files["bad_header"]), metadata={"mmtok": "{not json"})
    return files


OUT_SUFFIXES = {"calibrate": ".toml"}  # commands whose --out is a file of one type, not a folder


def _args(
    path: list[str],
    command: click.Command,
    file: Path,
    out: Path,
    slot: str | None = None,
    slot_file: Path | None = None,
) -> list[str]:
    """``command`` with every required argument set to ``file`` (and the path option ``slot`` to ``slot_file``, or
    ``file``), --out set to a fresh path and other required options to a plain value."""
    args = list(path)
    for param in command.params:
        if isinstance(param, click.Argument) and (param.required or isinstance(param.type, click.Path)):
            args.append(str(file))
        elif isinstance(param, click.Option) and param.name == "out" and param.required:
            args += [param.opts[0], str(out) + OUT_SUFFIXES.get(" ".join(path), "")]
        elif isinstance(param, click.Option) and param.required:
            args += [param.opts[0], REQUIRED_VALUES.get(param.name, "x")]
        elif isinstance(param, click.Option) and param.name == slot:
            args += [param.opts[0], str(slot_file or file)]
    return args


def _path_options(command: click.Command) -> list[str]:
    return [
        p.name
        for p in command.params
        if isinstance(p, click.Option) and isinstance(p.type, click.Path) and p.name != "out" and not p.required
    ]


def _has_inputs(command: click.Command) -> bool:
    return any(isinstance(p, click.Argument) and p.required for p in command.params) or bool(_path_options(command))


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Commands that write caches or taken-in data write them under tmp_path; relative outputs land there too."""
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("path", "command"), cases())
def test_an_unknown_flag_is_a_usage_error(path, command):
    _ok(runner.invoke(app, [*path, "--no-such-flag"]), codes=(2,))


@pytest.mark.parametrize(("path", "command"), cases())
def test_a_number_option_given_a_word_or_a_value_below_its_minimum_is_a_usage_error(path, command, bad, isolated):
    for param in command.params:
        if not isinstance(param, click.Option) or param.is_flag:
            continue
        values = []
        if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
            values.append("lots")
        if getattr(param.type, "min", None) is not None:
            values.append(str(param.type.min - 1))
        for value in values:
            args = _args(path, command, bad["text"], isolated / "out")
            _ok(runner.invoke(app, [*args, param.opts[0], value]), codes=(2,))


@pytest.mark.parametrize(("path", "command"), cases(lambda command: _has_inputs(command)))
def test_bad_files_are_one_line_each_never_a_traceback(path, command, bad, isolated):
    slots = (
        [None, *_path_options(command)]
        if any(isinstance(p, click.Argument) for p in command.params)
        else _path_options(command)
    )
    for name, file in bad.items():
        if (" ".join(path), name) in KNOWN_GAPS:
            continue
        for slot in slots:
            result = runner.invoke(app, _args(path, command, file, isolated / f"out-{name}-{slot}", slot))
            _ok(result)
            assert result.stderr.count("\n") <= 12, result.stderr  # one line per input, not a dump


CONFIGS = ("config", "spec", "suite", "prices")  # parameters that name a TOML file of settings


@pytest.mark.parametrize(("path", "command"), cases(lambda command: any(p.name in CONFIGS for p in command.params)))
def test_a_config_with_unknown_keys_or_wrong_types_is_one_line(path, command, isolated, samples):
    wrong = isolated / "wrong.toml"
    wrong.write_text('name = 3\n[model]\nno_such_key = 1\n[train]\nsteps = "many"\n[models.x]\nsource = 1\n')
    for param in command.params:
        if param.name not in CONFIGS:
            continue
        if isinstance(param, click.Argument):
            args = _args(path, command, wrong, isolated / "out")
        else:  # --prices: the other inputs are good ones, so the sheet is what fails
            args = _args(path, command, samples / "chelsea.jpg", isolated / "out", param.name, wrong)
        result = runner.invoke(app, args)
        _ok(result)
        assert len(_errors(result)) == 1, result.stderr


@pytest.mark.parametrize(("path", "command"), cases())
def test_a_text_option_given_nonsense_never_raises(path, command, bad, isolated):
    """With a bad input (or none), a nonsense value for any text option is a usage error, an input error, or (for
    free text) accepted; never an exception."""
    for param in command.params:
        if not isinstance(param, click.Option) or param.is_flag or param.name == "out":
            continue
        if not isinstance(param.type, click.types.StringParamType):
            continue
        if not _has_inputs(command) and param.name not in ("steps", "provider", "modality"):
            continue  # with nothing to fail on, the command would run for real (demo, prices update)
        # A command that listens until killed gets the bad file as its sheet, so it fails before it listens: free
        # text it accepts (`proxy --ledger nonsense!`) would otherwise serve on its default port inside pytest.
        slot = "prices" if " ".join(path) in LISTENERS else None
        args = _args(path, command, bad["text"], isolated / "out", slot)
        _ok(runner.invoke(app, [*args, param.opts[0], "nonsense!"]), codes=(0, 1, 2))


LISTENERS = {"proxy"}  # commands that serve on a port until a signal ends them


# ------------------------------------------------------------------------------------------------ machine output
NO_JSON = {  # commands whose output has a format of its own
    "version",  # one word: the version (`mmtok --version` too)
    "proxy",  # a server: it speaks the providers' HTTP APIs (what it did goes to the ledger: `mmtok ledger --json`)
    "mcp",  # a server: it speaks the Model Context Protocol, JSON-RPC on stdio or HTTP
    "hook",  # answers an agent's hook event in the agent's own JSON format
}
TABLES = {"inspect", "models", "prices list"}


@pytest.mark.parametrize(("path", "command"), cases())
def test_every_command_has_json_and_every_table_command_csv(path, command):
    flags = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}
    name = " ".join(path)
    assert name in NO_JSON or "--json" in flags
    assert name not in TABLES or "--csv" in flags
    assert "-h" in runner.invoke(app, [*path, "-h"]).output or runner.invoke(app, [*path, "-h"]).exit_code == 0


# ------------------------------------------------------------------------------------------- named option values
@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokens")
    image = TokenSequence("image", ids=torch.randint(0, 1024, (64,)), grid=(8, 8), tokenizer="vq-clip-tiny")
    audio = TokenSequence(
        "audio",
        ids=torch.randint(0, 1024, (16, 2)),
        embeddings=torch.randn(16, 256),
        times=torch.arange(16, dtype=torch.float64) / 16,
        tokenizer="av-tiny",
        meta={"tokens_per_second": 16.0},
    )
    return {
        "image": image.save(root / "photo.safetensors"),
        "audio": audio.save(root / "speech.safetensors"),
        "shard": save_sequences(
            root / "shard.safetensors", {f"photo{i}.jpg": image.select(torch.arange(64)) for i in range(12)}
        ),
    }


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    ("args", "code", "flag"),
    [
        (["tokenize", "{chelsea}", "--image-size", "100", "--out", "{tmp}/t"], 2, "--image-size"),
        (["tokenize", "{chelsea}", "--image-size", "0", "--out", "{tmp}/t"], 2, "--image-size"),
        (["tokenize", "{chelsea}", "--image-size", "8000000", "--out", "{tmp}/t"], 2, "--image-size"),
        (["tokenize", "{chelsea}", "--truncate", "mi", "--threshold", "nan", "--out", "{tmp}/t"], 2, "--threshold"),
        (["tokenize", "{chelsea}"], 2, "--out"),
        (["tokenize", "{chelsea}", "--device", "gpu7", "--out", "{tmp}/t"], 2, "--device"),
        (["tokenize", "{chelsea}", "--out", "{chelsea}"], 2, "--out"),
        (["tokenize", "{chelsea}", "--truncate", "bogus", "--keep-ratio", "0.5", "--out", "{tmp}/t"], 2, "--truncate"),
        (["tokenize", "{chelsea}", "--tokenizer", "no-such-tokenizer", "--out", "{tmp}/t"], 2, "--tokenizer"),
        (["tokenize", "{chelsea}", "--max-pixels", "0", "--out", "{tmp}/t"], 2, "--max-pixels"),
        (["tokenize", "{chelsea}", "--out", "{chelsea}/sub"], 2, "--out"),  # cannot be created
        (["tokenize", "{clip}", "--tokens-per-second", "0", "--out", "{tmp}/t"], 2, "--tokens-per-second"),
        (["tokenize", "{clip}", "--codebook-levels", "9", "--out", "{tmp}/t"], 1, "codebook levels must be 1 to 8"),
        (["tokenize", "{chelsea}", "--tokenizer", "text-bytes", "--out", "{tmp}/t"], 2, "--tokenizer"),
        (["tokenize", "{chelsea}", "--tokenizer", "av-tiny", "--out", "{tmp}/t"], 2, "--tokenizer"),
        (["tokenize", "{clip}", "--av-tokenizer", "vq-clip-tiny", "--out", "{tmp}/t"], 2, "--av-tokenizer"),
        (["shrink", "{chelsea}", "-m", "gpt-4o", "--out", "{chelsea}/sub"], 2, "--out"),
        (["tokenize", "{chelsea}", "--max-pixels", "1000", "--out", "{tmp}/t"], 1, "--max-pixels"),
        (["inspect", "--kind", "picture", "{chelsea}"], 2, "--kind"),
        (["inspect", "--max-pixels", "1000", "{chelsea}"], 1, "--max-pixels"),
        (["inspect", "--json", "--csv", "{chelsea}"], 2, "--csv"),
        (["price", "{chelsea}", "--max-pixels", "1000"], 1, "--max-pixels"),
        (["price", "--text", "x", "--detail", "bogus"], 2, "detail"),
        (["models", "--provider", "nosuch"], 2, "--provider"),
        (["models", "--modality", "smell"], 2, "--modality"),
        (["detokenize", "{audio}", "--out", "{tmp}/x.png"], 2, "--out"),
        (["detokenize", "{image}", "--out", "{tmp}/x.wav"], 2, "--out"),
        (["detokenize", "{image}", "--out", "{tmp}", "--device", "cpu"], 2, "--out"),
        (["truncate", "{image}", "--out", "{tmp}", "--method", "uniform", "--keep", "3"], 2, "--out"),
        (["demo", "--steps", "inspect,juggle", "--out", "{tmp}/d"], 2, "--steps"),
        (["demo", "--out", "{chelsea}"], 2, "--out"),
        (["prices", "update", "--reset", "--from", "{chelsea}"], 2, "--reset"),
        (["prices", "import-litellm", "{chelsea}", "--out", "{tmp}/s.toml", "--as-of", "soon"], 2, "--as-of"),
    ],
)
def test_a_bad_option_value_exits_as_documented_naming_the_flag(args, code, flag, samples, tokens, isolated):
    values = {"chelsea": samples / "chelsea.jpg", "clip": samples / "clip.mp4", "tmp": isolated, **tokens}
    result = runner.invoke(app, [a.format(**values) for a in args])
    _ok(result, codes=(code,))
    assert flag in result.output
    for name in ("image_size", "max_pixels", "keep_ratio", "json_out", "csv_out"):
        assert f"{name} " not in result.output and f"{name}:" not in result.output  # flags, not Python names


def test_detokenize_on_a_shard_without_key_lists_its_keys_in_one_line(tokens, isolated):
    result = runner.invoke(app, ["detokenize", str(tokens["shard"]), "--out", str(isolated / "x.png")])
    _ok(result, codes=(1,))
    (line,) = _errors(result)
    assert "holds 12 sequences (photo0.jpg, photo1.jpg," in line and "and 4 more); choose one with --key" in line


def test_an_empty_training_config_is_refused_rather_than_training_every_default(bad, isolated):
    empty = isolated / "empty.toml"
    empty.write_text("# nothing set\n")
    for name in ("clip", "vq", "av", "backbone", "critic"):
        result = runner.invoke(app, ["train", name, str(empty)])
        _ok(result, codes=(2,))
        assert _errors(result) == [
            f"error: {empty}: training config is empty (give at least the [train] section's out)"
        ]


def test_a_folder_with_nothing_to_tokenize_is_an_error(isolated):
    folder = isolated / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("hello\n")
    result = runner.invoke(app, ["tokenize", str(folder), "--out", str(isolated / "t")])
    _ok(result, codes=(1,))
    assert _errors(result) == [f"error: {folder}: no images, audio or video to tokenize in this folder"]


def test_price_errors_name_the_file_and_model_once_whatever_the_number_of_models(samples):
    speech = str(samples / "speech.wav")
    one = runner.invoke(app, ["price", speech, "-m", "gpt-4o", "--json"])
    two = runner.invoke(app, ["price", speech, "-m", "gpt-4o", "-m", "claude-opus-4-7", "--json"])
    line = f"error: {speech}: gpt-4o does not take audio"
    assert _errors(one) == [line] and _errors(two)[0] == line
    assert _errors(two)[1] == f"error: {speech}: claude-opus-4-7 does not take audio"
    unknown = runner.invoke(app, ["price", "--text", "hi", "-m", "nosuch-model", "-m", "gpt-4o"])
    alone = runner.invoke(app, ["price", "--text", "hi", "-m", "nosuch-model"])
    assert _errors(unknown)[0] == _errors(alone)[0] == "error: unknown model 'nosuch-model' (see `mmtok models`)"


def test_eval_run_and_report_print_one_json_object(tmp_path, samples):
    manifest = tmp_path / "images.jsonl"
    manifest.write_text(
        json.dumps({"id": "a", "path": str(samples / "chelsea.jpg")})
        + "\n"
        + json.dumps({"id": "b", "path": str(tmp_path / "missing.png")})
        + "\n"
    )
    suite = tmp_path / "suite.toml"
    suite.write_text(
        f'name = "tiny"\n[dataset]\nkind = "images"\nsource = "{manifest}"\n'
        '[pipeline]\ntokenizer = "vq-clip-tiny"\nimage_size = 32\n[metrics]\nnames = ["psnr"]\n'
    )
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "run", str(suite), "--out", str(out), "--json"])
    _ok(result, codes=(1,))  # one item failed
    (summary,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (summary["items"], summary["ok"], summary["failed"]) == (2, 1, 1)
    assert summary["results"] == str(out / "results.jsonl") and "psnr_db" in summary["metrics"]
    assert len(_errors(result)) == 1 and "missing.png" in _errors(result)[0]
    report = runner.invoke(app, ["eval", "report", str(out), "--json"])
    assert report.exit_code == 0, report.output
    (files,) = [json.loads(line) for line in report.stdout.splitlines()]
    assert Path(files["markdown"]).is_file() and Path(files["html"]).is_file()


def test_prices_list_json_csv_and_a_table_that_fits_80_columns():
    rows = [json.loads(line) for line in runner.invoke(app, ["prices", "list", "--json"]).stdout.splitlines()]
    assert {r["model"] for r in rows} >= {"mmtok-semantic", "llava-1.5-7b"} and all(r["source"] for r in rows)
    assert all(r["shipped"] for r in rows)
    csv_out = runner.invoke(app, ["prices", "list", "--csv"]).stdout.splitlines()
    assert csv_out[0].startswith("model,provider,as_of,source") and len(csv_out) == len(rows) + 1
    table = runner.invoke(app, ["prices", "list"], env={"COLUMNS": "80"})
    assert table.exit_code == 0 and max(len(line) for line in table.stdout.splitlines()) <= 80
    assert "mmtok-semantic" in table.stdout


def test_prices_list_cites_no_file_outside_the_package():
    rows = [json.loads(line) for line in runner.invoke(app, ["prices", "list", "--json"]).stdout.splitlines()]
    assert not [r["model"] for r in rows if "../" in r["source"]]


def test_an_output_that_cannot_be_written_is_that_inputs_error_and_the_batch_goes_on(samples, isolated):
    out = isolated / "t"
    (out / "chelsea.safetensors").mkdir(parents=True)  # a folder where chelsea's tokens would go
    result = runner.invoke(app, ["tokenize", str(samples / "chelsea.jpg"), str(samples / "speech.wav"), "-o", str(out)])
    _ok(result, codes=(1,))
    errors = _errors(result)
    assert len(errors) == 1 and "chelsea.jpg" in errors[0] and "cannot write" in errors[0]
    assert (out / "speech.safetensors").is_file()


def test_a_missing_input_does_not_move_the_other_outputs(samples, isolated):
    out = isolated / "t"
    result = runner.invoke(app, ["tokenize", str(samples / "chelsea.jpg"), "/no/such/dir/x.jpg", "-o", str(out)])
    _ok(result, codes=(1,))
    assert (out / "chelsea.safetensors").is_file() and len(_errors(result)) == 1
