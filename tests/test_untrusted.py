"""Files are data: a token file, config or checkpoint never chooses code to run, and sizes are checked first.

Each test holds the reproduction of a finding from the "untrusted files" review (issue 12).
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import CheckpointError, ConfigError, TokenError
from mmtok.registry import get_entry

runner = CliRunner()


def _popen_config(folder: Path, marker: Path) -> Path:
    """The attack: a registry config whose class is subprocess.Popen, with a shell command as its options."""
    config = folder / "evil.toml"
    config.write_text(
        'name = "evil"\nkind = "tokenizer"\nclass = "subprocess:Popen"\n'
        f'[options]\nargs = ["sh", "-c", "touch {marker}"]\n'
    )
    return config


def _token_file(path: Path, tokenizer: str, grid: list[int] | None = (16, 16)) -> Path:
    header = {"format": "mmtok.TokenSequence", "version": 1, "modality": "image", "grid": grid, "tokenizer": tokenizer}
    save_file({"ids": torch.randint(0, 1024, (256,))}, str(path), metadata={"mmtok": json.dumps(header)})
    return path


def _raw_safetensors(path: Path, header_text: str, tensors: dict[str, torch.Tensor] | None = None) -> Path:
    save_file(tensors or {"ids": torch.arange(4)}, str(path), metadata={"mmtok": header_text})
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["detokenize", "{tokens}", "--out", "{out}.png"],
        ["truncate", "{tokens}", "--method", "mi", "--context", "a cat", "--out", "{out}.safetensors"],
        ["truncate", "{tokens}", "--method", "divprune", "--keep-ratio", "0.5", "--out", "{out}.safetensors"],
    ],
)
def test_token_file_naming_a_popen_config_runs_nothing(tmp_path, command):
    marker = tmp_path / "pwned"
    config = _popen_config(tmp_path, marker)
    tokens = _token_file(tmp_path / "tokens.safetensors", str(config))
    args = [part.format(tokens=tokens, out=tmp_path / "out") for part in command]
    result = runner.invoke(app, args)
    assert not marker.exists(), "the token file ran a command"
    assert result.exit_code == 1, result.output
    assert "not a registered tokenizer" in result.output
    assert "Traceback" not in result.output


def test_config_naming_any_class_is_refused_before_import(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "canary_module.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Thing: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "canary.toml"
    config.write_text('name = "canary"\nkind = "tokenizer"\nclass = "canary_module:Thing"\n')
    with pytest.raises(ConfigError, match="is not an mmtok model class"):
        mmtok.get_tokenizer(config)
    with pytest.raises(ConfigError, match="is not an mmtok model class"):
        mmtok.get_tokenizer(_popen_config(tmp_path, tmp_path / "pwned"))
    assert not marker.exists() and "canary_module" not in sys.modules


def test_checkpoint_config_cannot_reach_a_pickle(tmp_path):
    """`"class": "transformers:AutoModel"` beside a pickled pytorch_model.bin: refused, transformers not called."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"class": "transformers:AutoModel", "kind": "tokenizer"}))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(ConfigError, match="'transformers:AutoModel' is not an mmtok model class"):
        mmtok.get_tokenizer(folder)


def test_checkpoint_asking_for_a_huge_model_fails_before_allocating(tmp_path):
    folder = tmp_path / "vq"
    shutil.copytree(get_entry("vq-clip-tiny").weights, folder)
    config = json.loads((folder / "config.json").read_text())
    config["config"]["codebook_size"] = 1e9  # a float: refused by type
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"codebook_size = 1000000000.0 is not a int"):
        mmtok.get_tokenizer(folder)
    config["config"]["codebook_size"] = 1_000_000_000  # an int past the bound: refused before anything is built
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="codebook_size must be an integer from 1 to 1048576"):
        mmtok.get_tokenizer(folder)
    config["config"]["codebook_size"] = 1 << 20  # within it: built on the meta device, compared with the file
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="shape mismatch"):
        mmtok.get_tokenizer(folder)


def test_shipped_weights_still_load_through_the_checked_build():
    vq = mmtok.get_tokenizer("vq-clip-tiny")
    assert vq.config.codebook_size == 1024
    assert mmtok.get_model("clip-tiny", kind="teacher").embed_dim == 128


@pytest.mark.parametrize(
    ("header", "match"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("[1, 2]", "must be a JSON object"),
        ('{"format": "mmtok.TokenSequence", "modality": "image", "grid": "16x16"}', "grid must be"),
        ('{"format": "mmtok.TokenSequence", "modality": "image", "meta": [1]}', "meta must be a JSON object"),
        ('{"format": "mmtok.TokenSequence", "modality": "image", "tokenizer": 7}', "tokenizer must be a name"),
        ('{"format": "mmtok.TokenSequence", "modality": 3}', "modality must be one of"),
        ('{"format": "mmtok.TokenSequence", "modality": "image", "version": "1"}', "version must be an integer"),
        ('{"format": "mmtok.TokenSequences", "sequences": [1]}', "non-empty 'sequences' object"),
        ('{"format": "mmtok.TokenSequence", "modality": "image", "grid": [100000, 100000]}', "over the limit"),
        ('{"format": "mmtok.TokenSequence", "modality": "image", "grid": [1, 2]}', "do not fit a 1x2 grid"),
    ],
)
def test_malformed_headers_are_token_errors(tmp_path, header, match):
    path = _raw_safetensors(tmp_path / "bad.safetensors", header)
    with pytest.raises(TokenError, match=match) as info:
        mmtok.load_sequences(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("tensors", "match"),
    [
        ({"ids": torch.arange(4, dtype=torch.int32)}, "ids must be int64"),
        ({"ids": torch.arange(4), "positions": torch.arange(4, dtype=torch.float32)}, "positions must be int64"),
        ({"ids": torch.arange(4), "times": torch.arange(4)}, "times must be float32 or float64, got int64"),
        ({"ids": torch.arange(4) - 2}, "ids must be non-negative"),
        ({"ids": torch.arange(4), "positions": torch.tensor([0, 1, 2, 99])}, "position 99 is outside the 2x2 grid"),
        ({"ids": torch.arange(4), "evil": torch.zeros(1)}, "unexpected tensor"),
    ],
)
def test_tensors_of_the_wrong_kind_are_token_errors(tmp_path, tensors, match):
    header = json.dumps({"format": "mmtok.TokenSequence", "modality": "image", "grid": [2, 2]})
    path = _raw_safetensors(tmp_path / "bad.safetensors", header, tensors)
    with pytest.raises(TokenError, match=match):
        mmtok.load_sequences(path)


def test_huge_grid_never_reaches_truncate(tmp_path):
    tokens = _token_file(tmp_path / "big.safetensors", "vq-clip-tiny", grid=[100_000, 100_000])
    result = runner.invoke(app, ["truncate", str(tokens), "--context", "a cat", "--out", str(tmp_path / "o.st")])
    assert result.exit_code == 1
    assert "over the limit" in result.output and "Traceback" not in result.output


def test_a_shard_header_is_checked_against_its_tensors(tmp_path):
    text = {"format": "mmtok.TokenSequence", "modality": "text"}
    header = {"format": "mmtok.TokenSequences", "sequences": {"a": text}}
    path = tmp_path / "shard.safetensors"
    save_file({"a/ids": torch.arange(3), "b/ids": torch.arange(2)}, str(path), metadata={"mmtok": json.dumps(header)})
    with pytest.raises(TokenError, match="belong to no sequence: b/ids"):
        mmtok.load_sequences(path)
    header["sequences"] = {"a": 5, "b": header["sequences"]["a"]}
    save_file({"a/ids": torch.arange(3), "b/ids": torch.arange(2)}, str(path), metadata={"mmtok": json.dumps(header)})
    with pytest.raises(TokenError, match=r"shard.safetensors\[a\]: not an mmtok TokenSequence header"):
        mmtok.load_sequences(path)


def test_safetensors_header_length_lie_is_a_token_error(tmp_path):
    path = tmp_path / "lie.safetensors"
    path.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(TokenError, match="not a safetensors file"):
        mmtok.load_sequences(path)


@pytest.mark.parametrize(
    "spec",
    ["open_clip:RN50//tmp/evil.pt", "open_clip:RN50/../evil.pt", "open_clip:RN50@/tmp/evil.pt", "open_clip:RN50/a b"],
)
def test_a_teacher_spec_never_hands_open_clip_a_pickle_path(spec, tmp_path):
    """open_clip would torch.load a path given as its pretrained tag; a spec from a suite's fd_extractor reached it."""
    from mmtok.errors import CheckpointError
    from mmtok.models.teacher import Teacher

    with pytest.raises(CheckpointError, match="pickle can run code"):
        Teacher.from_pretrained(spec)


# -------------------------------------------------------------- sizes from a file are checked before the work
def _wav_header_only(path: Path, rate: int, data_bytes: int) -> Path:
    """A PCM-16 mono WAV whose header says ``rate`` Hz over ``data_bytes`` of (silent) samples."""
    body = b"\0" * data_bytes
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    path.write_bytes(
        b"RIFF" + struct.pack("<I", 36 + len(body)) + b"WAVEfmt " + struct.pack("<I", 16) + fmt
        + b"data" + struct.pack("<I", len(body)) + body
    )  # fmt: skip
    return path


def test_a_small_file_declaring_hours_of_sound_is_refused_before_decoding(tmp_path):
    """32 KB at a declared 1 Hz is 16,000 s: it gave 256,000 tokens and 6 GB; a FLAC's total_samples can say more."""
    wav = _wav_header_only(tmp_path / "slow.wav", 1, 32_000)
    assert mmtok.load(wav).duration_s == 16_000
    with pytest.raises(mmtok.TokenError, match=r"declares 16,000 s; at most 14,400 s"):
        mmtok.get_tokenizer("av-tiny").encode(wav)
    with pytest.raises(mmtok.MediaError, match="at most 14,400 s are decoded whole"):
        mmtok.load(wav).waveform()
    result = runner.invoke(app, ["tokenize", str(wav), "--out", str(tmp_path / "t")])
    assert result.exit_code == 1 and "declares 16,000 s" in result.output and "Traceback" not in result.output


def test_token_files_whose_decode_or_features_would_not_fit_are_refused(tmp_path):
    tok = mmtok.get_tokenizer("vq-clip-tiny")
    big = mmtok.TokenSequence("image", ids=torch.zeros(512 * 512, dtype=torch.long), grid=(512, 512))
    with pytest.raises(mmtok.TokenError, match="512x512 grid would decode to 4096 px a side"):
        tok.decode(big)
    with pytest.raises(mmtok.TokenError, match="at most 8,192 are attended over"):
        tok.features(big)
    av = mmtok.get_tokenizer("av-tiny")
    for meta, says in (
        ({"tokens_per_second": 1e-9}, "from 1 to 250"),
        ({"tokens_per_second": 1.0}, "at most 14,400 s are decoded"),
    ):
        n = 20_000 if meta["tokens_per_second"] == 1.0 else 16
        seq = mmtok.TokenSequence("audio", embeddings=torch.zeros(n, 256), meta=meta, tokenizer="av-tiny")
        with pytest.raises(mmtok.TokenError, match=says):
            av.decode(seq)
    from mmtok.truncation import tome_merge

    with pytest.raises(mmtok.TruncationError, match="at most 16,384"):
        tome_merge(torch.zeros(20_000, 4), 10)


def test_divprune_is_bounded_and_keeps_its_greedy_choice(tmp_path):
    """100,000 embeddings kept at half by divprune ran 554 s (every step re-indexed the whole kept list, and each
    kept token is compared with every token): at most 16,384 tokens now, one line on the CLI; the choice is the
    same greedy max-min one."""
    import torch.nn.functional as F
    from typer.testing import CliRunner

    from mmtok.cli.main import app
    from mmtok.truncation.methods import _select

    def greedy(features, k):  # DivPrune as first written here
        unit = F.normalize(features, dim=1)
        chosen = [int(features.norm(dim=1).argmax())]
        distance = 1 - unit @ unit[chosen[0]]
        for _ in range(k - 1):
            distance[chosen] = -1
            chosen.append(int(distance.argmax()))
            distance = torch.minimum(distance, 1 - unit @ unit[chosen[-1]])
        return torch.tensor(chosen)

    features = torch.randn(2000, 32, generator=torch.Generator().manual_seed(0))
    for k in (1, 7, 1000, 2000):
        assert torch.equal(_select(features, "divprune", k, 0), greedy(features, k))
    big = tmp_path / "big.safetensors"
    mmtok.TokenSequence("image", embeddings=torch.randn(20_000, 8)).save(big)
    result = CliRunner().invoke(
        app, ["truncate", str(big), "--method", "divprune", "--keep-ratio", "0.5", "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "divprune on 20,000 tokens: at most 16,384" in result.stderr


def test_a_file_name_cannot_split_or_forge_a_message_line(tmp_path):
    evil = tmp_path / "evil\nerror: fake.png: all good \x1b[31m.jpg"
    evil.write_bytes(b"not an image")
    result = runner.invoke(app, ["inspect", str(evil)])
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "\\n" in lines[0] and "\\x1b" in lines[0] and "\x1b" not in result.output
    good = tmp_path / "ok\nerror: x.png.jpg"
    good.write_bytes((Path(mmtok.__file__).parent / "samples" / "media" / "chelsea.jpg").read_bytes())
    table = runner.invoke(app, ["inspect", str(good)])
    assert (
        table.exit_code == 0
        and "\\n" in table.output
        and not any(line.startswith("error:") for line in table.output.splitlines())
    )  # a table cell is escaped too


def test_anything_a_command_did_not_handle_is_one_error_line_not_a_traceback(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(mmtok, "iter_files", broken)
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "unexpected TypeError: a bug" in result.output


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"num_res_blocks": 10**7}, "num_res_blocks must be an integer from 0 to 32"),
        ({"channel_mult": []}, "channel_mult must be a list of integers"),
        ({"image_size": 2**40}, "image_size must be an integer from 8 to 2048"),
        ({"fit": "explode"}, "fit must be crop or pad"),
    ],
)
def test_a_model_folders_config_cannot_ask_for_an_absurd_model(change, says, tmp_path, samples):
    """A copy of vq-clip-tiny whose config.json asks for 10 million blocks was still building after a minute."""
    folder = tmp_path / "mine"
    shutil.copytree(Path(mmtok.registry.get_entry("vq-clip-tiny").weights), folder)
    config = json.loads((folder / "config.json").read_text())
    config["config"].update(change)
    (folder / "config.json").write_text(json.dumps(config))
    args = ["tokenize", str(samples / "chelsea.jpg"), "--tokenizer", str(folder), "--out", str(tmp_path / "t")]
    result = runner.invoke(app, args, env={"COLUMNS": "400"})  # the usage box on one line
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_an_image_too_big_to_decode_in_a_folder_is_its_error_and_the_others_are_written(tmp_path, samples):
    """A decode that runs out of memory in a DataLoader worker stopped the folder: no shard, the good images lost."""
    from mmtok.pipeline import tokenize_folder

    vq = mmtok.get_tokenizer("vq-clip-tiny").eval()
    good = [samples / "chelsea.jpg", samples / "astronaut.png"]
    bad = tmp_path / "bad.png"
    shutil.copy(samples / "astronaut.png", bad)

    class OutOfMemoryOnBad:
        def preprocess(self, path, image_size):
            if Path(path) == bad:
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
            return vq.preprocess(path, image_size)

        def encode_batch(self, x):
            return vq.encode_batch(x)

        def sequence(self, ids, meta):
            return vq.sequence(ids, meta)

    errors: list[str] = []
    report = tokenize_folder([*good, bad], OutOfMemoryOnBad(), tmp_path / "out", workers=0, on_error=errors.append)
    assert len(report.failed) == 1 and len(errors) == 1 and "bad.png" in errors[0] and "cannot decode" in errors[0]
    assert len(mmtok.load_sequences(next((tmp_path / "out").glob("shard-*.safetensors")))) == 2
