"""VQ tokenizer: encode/decode/features API, preprocessing of awkward images, checkpoints, training (single
process, resume, two processes with gloo) and the tokenize/detokenize CLI — on a tiny model and tiny teacher."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import PIL.Image
import pytest
import torch
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import CheckpointError, ConfigError, TokenError
from mmtok.models.teacher import Teacher
from mmtok.models.vq import VQConfig, VQTokenizer
from tests.makers import tiny_teacher_config, write_image

TINY_MODEL = """
[model]
image_size = 32
channels = 16
channel_mult = [1, 2, 2]
code_dim = 8
codebook_size = 64
teacher = "{teacher}"
teacher_dim = 32
align_width = 32
align_heads = 2

[train]
steps = 3
batch_size = 8
samples = 64
log_every = 1
checkpoint_every = 1
out = "{out}"
name = "vq-test"
"""


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("teacher") / "clip-test"
    cfg = tiny_teacher_config()
    Teacher(cfg, name="clip-test").save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory, tiny_teacher):
    torch.manual_seed(0)
    cfg = VQConfig(
        image_size=32,
        channels=16,
        channel_mult=[1, 2, 2],
        codebook_size=64,
        teacher=str(tiny_teacher),
        teacher_dim=32,
        align_width=32,
        align_heads=2,
    )
    tok = VQTokenizer(cfg, name="vq-test")
    tok(torch.rand(16, 3, 32, 32) * 2 - 1)  # one training pass: k-means initialises the codebook
    folder = tmp_path_factory.mktemp("tok") / "vq-test"
    tok.eval().save_pretrained(folder)
    return folder


def write_config(tmp_path, teacher) -> str:
    text = TINY_MODEL.format(teacher=teacher, out=tmp_path / "run")
    path = tmp_path / "vq.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_encode_decode_round_trip(tiny_tokenizer, samples):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    seq = tok.encode(mmtok.load(samples / "chelsea.jpg"))
    assert len(seq) == 16 and seq.grid == (4, 4) and seq.tokenizer == "vq-test"
    assert int(seq.ids.min()) >= 0 and int(seq.ids.max()) < 64
    assert seq.meta["source_size"] == [451, 300]
    image = tok.decode(seq)
    assert (image.width, image.height) == (32, 32)


def test_tokens_per_image_is_a_setting(tiny_tokenizer, samples):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    assert len(tok.encode(samples / "coffee.webp", image_size=64)) == 64
    assert len(tok.encode(samples / "coffee.webp", image_size=16)) == 4
    assert tok.tokens_per_image(128) == 256
    with pytest.raises(TokenError, match="multiple of 8"):
        tok.encode(samples / "coffee.webp", image_size=30)


def test_features_work_on_truncated_sequences_but_decode_needs_all_tokens(tiny_tokenizer, samples):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    seq = tok.encode(samples / "astronaut.png")
    full = tok.features(seq)
    part = tok.features(seq.select(torch.tensor([0, 5, 10])))
    assert full.shape == part.shape == (32,)
    assert torch.allclose(full.norm(), torch.tensor(1.0), atol=1e-5)
    _, tokens = tok.features(seq, tokens=True)
    assert tokens.shape == (16, 32)
    with pytest.raises(TokenError, match="needs all 16 tokens"):
        tok.decode(seq.select(torch.tensor([0, 1])))


def test_ids_outside_the_codebook_and_empty_sequences_are_token_errors(tiny_tokenizer):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    wrong = mmtok.TokenSequence("image", ids=torch.tensor([3, 64]), grid=(1, 2), tokenizer="vq-test")
    for use in (tok.features, tok.local_codes, tok.decode):
        with pytest.raises(TokenError, match=r"ids outside the codebook \[0, 64\)"):
            use(wrong)
    empty = mmtok.TokenSequence("image", ids=torch.zeros(0, dtype=torch.long), grid=(4, 4), tokenizer="vq-test")
    for use in (tok.features, tok.local_codes):
        with pytest.raises(TokenError, match=r"no ids \(an empty sequence\)"):
            use(empty)


def test_saved_tokenizer_reloads_identically(tiny_tokenizer, tmp_path, samples):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    tok.save_pretrained(tmp_path / "again")
    again = mmtok.get_tokenizer(tmp_path / "again")
    image = mmtok.load(samples / "coffee.webp")
    assert torch.equal(tok.encode(image).ids, again.encode(image).ids)


@pytest.mark.parametrize(
    ("size", "mode"), [((40, 30), "L"), ((40, 30), "RGBA"), ((1, 1), "RGB"), ((3000, 60), "RGB"), ((60, 3000), "P")]
)
def test_awkward_images_are_preprocessed(tiny_tokenizer, tmp_path, size, mode):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    path = write_image(tmp_path / "x.png", size, "PNG", mode=mode)
    seq = tok.encode(mmtok.load(path))
    assert len(seq) == 16 and seq.meta["source_size"] == list(size)


def test_huge_jpeg_is_decoded_at_reduced_scale(tiny_tokenizer, tmp_path):
    path = write_image(tmp_path / "big.jpg", (6000, 4000), "JPEG")
    assert len(mmtok.get_tokenizer(tiny_tokenizer).encode(path)) == 16


def test_pad_fit_keeps_the_whole_image(tiny_teacher, samples):
    tok = VQTokenizer(
        VQConfig(
            image_size=32,
            channels=16,
            channel_mult=[1, 2, 2],
            codebook_size=64,
            fit="pad",
            teacher_dim=32,
            align_width=32,
            align_heads=2,
        )
    ).eval()
    seq = tok.encode(samples / "coffee.webp")  # 600 x 400 -> 32 x 21 content, padded to 32 x 32
    assert seq.meta["content_box"] == [5, 0, 21, 32]
    assert (tok.decode(seq).width, tok.decode(seq).height) == (32, 21)


def test_checkpoint_whose_config_and_weights_disagree(tiny_tokenizer, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_tokenizer, broken)
    config = json.loads((broken / "config.json").read_text())
    config["config"]["codebook_size"] = 128
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"weights do not match the config.*shape mismatch"):
        mmtok.get_tokenizer(broken)


def test_pickle_checkpoints_are_refused(tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    torch.save({"w": torch.zeros(2)}, folder / "model.pt")
    with pytest.raises(CheckpointError, match=r"pickle checkpoints .* not loaded"):
        VQTokenizer.from_pretrained(folder)
    with pytest.raises(CheckpointError, match="pickle checkpoints are not loaded"):
        VQTokenizer.from_pretrained(folder / "model.pt")


def test_unknown_tokenizer_name():
    with pytest.raises(ConfigError, match=r"unknown tokenizer 'vq-clip-tine'; did you mean vq-clip-tiny\b"):
        mmtok.get_tokenizer("vq-clip-tine")


@pytest.mark.parametrize("quantizer", ["fsq", "rvq"])
def test_other_quantizers_round_trip(quantizer, samples, tmp_path):
    tok = VQTokenizer(
        VQConfig(
            image_size=32,
            channels=16,
            channel_mult=[1, 2, 2],
            quantizer=quantizer,
            codebook_size=64,
            fsq_levels=[4, 4, 4],
            teacher_dim=32,
            align_width=32,
            align_heads=2,
        )
    )
    tok(torch.rand(16, 3, 32, 32) * 2 - 1)
    tok.eval()
    seq = tok.encode(samples / "chelsea.jpg")
    assert seq.ids.shape == ((16, 2) if quantizer == "rvq" else (16,))
    assert tok.decode(seq).width == 32
    assert tok.features(seq).shape == (32,)
    folder = tok.save_pretrained(tmp_path / quantizer)
    again = mmtok.get_tokenizer(folder).eval()  # FSQ once failed here: built on the meta device, it read .item()
    assert torch.equal(again.encode(samples / "chelsea.jpg").ids, seq.ids)


def test_training_runs_logs_codebook_stats_and_resumes(tiny_teacher, tmp_path):
    from mmtok.models.train_vq import train_vq

    config = write_config(tmp_path, tiny_teacher)
    folder = train_vq(config, steps=2, device="cpu")
    log = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and {"usage", "ppl", "align", "percep"} <= set(log[0])
    train_vq(config, steps=4, resume=True, device="cpu")
    log = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4]  # resumed at step 2, not restarted
    trained = mmtok.get_tokenizer(folder)
    assert json.loads((folder / "config.json").read_text())["training"]["steps"] == 4
    assert trained.tokens_per_image() == 16


@pytest.mark.timeout(300)
def test_two_processes_with_gloo(tiny_teacher, tmp_path):
    config = write_config(tmp_path, tiny_teacher)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29517",
            "-m",
            "mmtok.cli.main",
            "train",
            "vq",
            config,
            "--steps",
            "2",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert mmtok.get_tokenizer(tmp_path / "run").tokens_per_image() == 16


def test_cli_tokenize_folder_resume_and_detokenize(tiny_tokenizer, tmp_path, samples):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("chelsea.jpg", "coffee.webp", "astronaut.png"):
        shutil.copy(samples / name, photos / name)
    (photos / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 20)
    runner = CliRunner()
    args = [
        "tokenize",
        str(photos),
        "--tokenizer",
        str(tiny_tokenizer),
        "--out",
        str(tmp_path / "tok"),
        "--workers",
        "0",
        "--device",
        "cpu",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 1 and "bad.jpg" in first.stderr  # the bad file is reported, the rest tokenized
    assert "3 images" in first.stdout
    second = runner.invoke(app, [*args, "--resume"])
    assert "0 images" in second.stdout and "3 already done" in second.stdout
    shards = sorted((tmp_path / "tok" / "photos").glob("shard-*.safetensors"))
    assert len(mmtok.load_sequences(shards[0])) == 3 and len(shards) == 1  # nothing redone

    single = runner.invoke(
        app,
        [
            "tokenize",
            str(samples / "chelsea.jpg"),
            "--tokenizer",
            str(tiny_tokenizer),
            "--out",
            str(tmp_path / "one"),
            "--json",
            "--device",
            "cpu",
        ],
    )
    assert single.exit_code == 0, single.output
    row = json.loads(single.stdout)
    assert row["tokens"] == 16 and len(row["ids"]) == 16
    out = tmp_path / "recon.png"
    back = runner.invoke(
        app, ["detokenize", row["file"], "--out", str(out), "--tokenizer", str(tiny_tokenizer), "--device", "cpu"]
    )
    assert back.exit_code == 0, back.output
    assert PIL.Image.open(out).size == (32, 32)
    assert "centre-cropped: the 451x300 source" in back.stderr  # chelsea is not square


def test_encode_takes_a_pil_image_as_open_clip_users_pass_it(tiny_tokenizer, samples):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    from_file = tok.encode(mmtok.load(samples / "astronaut.png"))
    with PIL.Image.open(samples / "astronaut.png") as picture:
        from_pil = tok.encode(picture)
        grey = tok.encode(picture.convert("L"))
    assert torch.equal(from_pil.ids, from_file.ids) and from_pil.meta["source_size"] == [384, 384]
    assert len(grey) == 16
    with pytest.raises(TokenError, match="pass an mmtok Image, a PIL image, a path or a tensor"):
        tok.encode([1, 2, 3])


def test_a_reconstruction_says_when_the_source_was_centre_cropped(tiny_tokenizer, samples):
    tok = mmtok.get_tokenizer(tiny_tokenizer)
    wide = tok.decode(tok.encode(mmtok.load(samples / "chelsea.jpg")))  # 451 x 300
    square = tok.decode(tok.encode(mmtok.load(samples / "astronaut.png")))  # 384 x 384
    assert isinstance(wide, mmtok.Image) and (wide.width, wide.height) == (32, 32)
    assert wide.notes == (
        "centre-cropped: the 451x300 source was tokenized as its central 300x300 square (x 75..375, y 0..300); "
        "the edges are not in the tokens or the reconstruction",
    )
    assert wide.info()["notes"] == list(wide.notes) and square.notes == ()


def test_detokenize_json_names_the_output_and_its_notes(samples, tmp_path):
    vq = mmtok.get_tokenizer("vq-clip-tiny")
    tokens = vq.encode(mmtok.load(samples / "rocket_rotated.jpg")).save(tmp_path / "rocket.safetensors")
    result = CliRunner().invoke(app, ["detokenize", str(tokens), "--out", str(tmp_path / "r.webp"), "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["modality"] == "image" and row["out"] == str(tmp_path / "r.webp")
    assert row["notes"][0].startswith("centre-cropped: the 640x427 source")  # as displayed (EXIF orientation 6)
    assert PIL.Image.open(tmp_path / "r.webp").size == (64, 64)


def test_detokenize_writes_sound_for_audio_tokens_and_refuses_an_image_name(samples, tmp_path):
    import numpy as np

    from tests.makers import write_wav

    av = mmtok.get_tokenizer("av-tiny")
    tone = write_wav(tmp_path / "tone.wav", (0.3 * np.sin(np.arange(8000) / 5)).astype(np.float32))  # 0.5 s
    tokens = mmtok.save_sequences(tmp_path / "speech.safetensors", av.encode_streams(tone))
    refused = CliRunner().invoke(app, ["detokenize", str(tokens), "--out", str(tmp_path / "x.png")])
    assert refused.exit_code == 2 and not (tmp_path / "x.png").exists()
    assert (
        refused.stderr
        == f"error: --out {tmp_path / 'x.png'}: audio tokens decode to audio; name a .wav, .flac or .ogg file\n"
    )
    result = CliRunner().invoke(app, ["detokenize", str(tokens), "--out", str(tmp_path / "x.flac")])
    assert result.exit_code == 0, result.output
    sound = mmtok.load(tmp_path / "x.flac")
    assert sound.kind == "audio" and sound.duration_s == pytest.approx(0.5, abs=0.05)


# ------------------------------------------------------------------------------------------ photo data, new loss terms
def test_photo_mix_draws_its_sources_in_their_shares_and_never_a_held_out_photo():
    from mmtok.models.data import HELD_OUT_PHOTOS, WIDE_HELD_OUT_PHOTOS, PhotoMix, photo_split

    assert not set(photo_split("train")) & (set(HELD_OUT_PHOTOS) | set(WIDE_HELD_OUT_PHOTOS))
    mix = PhotoMix(32, 400, procedural_fraction=0.3, digit_fraction=0.2, seed=1)
    shares = {s: mix.sources.count(s) / len(mix) for s in ("photos", "dead_leaves", "fractal", "digits")}
    assert shares["photos"] == pytest.approx(0.5, abs=0.08) and shares["digits"] == pytest.approx(0.2, abs=0.06)
    assert shares["dead_leaves"] == pytest.approx(0.15, abs=0.05) and shares["fractal"] == pytest.approx(0.15, abs=0.05)
    image, _ = mix[0]
    assert image.shape == (3, 32, 32) and float(image.min()) >= -1 and float(image.max()) <= 1
    with pytest.raises(ConfigError, match="add up to at most 1"):
        PhotoMix(32, 4, procedural_fraction=0.8, digit_fraction=0.3)


def test_procedural_images_are_seeded_coloured_and_in_range():
    import random

    from mmtok.models.data import dead_leaves, fractal_noise

    for make in (dead_leaves, fractal_noise):
        a, b = make(48, random.Random(3)), make(48, random.Random(3))
        assert torch.equal(a, b) and a.shape == (3, 48, 48)
        assert float(a.min()) >= -1 and float(a.max()) <= 1
        assert float((a[0] - a[1]).abs().mean()) > 0.02  # colour, not grey
    leaves = dead_leaves(64, random.Random(0))
    assert len(torch.unique(leaves[0].flatten())) > 20  # many leaves, not one disc on a background


def test_photo_augment_crops_flips_and_jitters_to_the_asked_size():
    import random

    from mmtok.models.data import PhotoAugment, photo_split

    photo = photo_split("train")["astronaut"]
    rng = random.Random(0)
    crops = torch.stack([PhotoAugment()(photo, 40, rng) for _ in range(8)])
    assert crops.shape == (8, 3, 40, 40) and float(crops.min()) >= -1 and float(crops.max()) <= 1
    assert float(crops.std(0).mean()) > 0.05  # eight different views


def test_wide_held_out_set_adds_photos_from_other_packages():
    from mmtok.models.data import heldout_photo_centres, heldout_photo_set

    crops, names = heldout_photo_set(32, per_photo=2)
    assert sorted(set(names)) == ["china", "coffee", "flower", "grace_hopper", "motorcycle_left", "rocket"]
    assert crops.shape == (12, 3, 32, 32)
    whole, names = heldout_photo_centres(32)
    assert whole.shape == (6, 3, 32, 32) and "grace_hopper" in names


def test_init_keeps_what_fits_and_restarts_a_codebook_of_another_size(tiny_tokenizer, tiny_teacher):
    from mmtok.models.train_vq import load_init

    base = dict(image_size=32, channels=16, channel_mult=[1, 2, 2], teacher=str(tiny_teacher), teacher_dim=32)
    base.update(align_width=32, align_heads=2)
    same = VQTokenizer(VQConfig(codebook_size=64, **base))
    assert load_init(same, str(tiny_tokenizer)) == []
    assert torch.equal(
        same.state_dict()["decoder.conv_out.weight"], mmtok.get_tokenizer(tiny_tokenizer).decoder.conv_out.weight
    )
    bigger = VQTokenizer(VQConfig(codebook_size=128, **base))
    fresh = load_init(bigger, str(tiny_tokenizer))
    assert fresh and all(name.startswith("quantizer.") for name in fresh)


def test_training_with_photo_mix_effnet_and_late_adversarial_terms(tiny_teacher, tiny_tokenizer, tmp_path):
    from mmtok.models.train_vq import train_vq

    extra = (
        'mix = "photo-mix"\nprocedural_fraction = 0.3\ndigit_fraction = 0.2\n'
        f'init = "{tiny_tokenizer}"\neffnet_weight = 0.05\nadversarial_weight = 0.1\nadversarial_start = 1\n'
    )
    text = TINY_MODEL.format(teacher=tiny_teacher, out=tmp_path / "run").replace("[train]\n", "[train]\n" + extra)
    config = tmp_path / "vq.toml"
    config.write_text(textwrap.dedent(text))
    folder = train_vq(config, steps=2, device="cpu")
    log = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    assert "effnet" in log[0] and "g_adv" not in log[0]  # the adversarial term starts at step 2
    assert {"g_adv", "d_loss"} <= set(log[1])
    assert (folder / "discriminator_state.safetensors").is_file()
    assert json.loads((folder / "config.json").read_text())["training"]["fresh_after_init"] == []


def test_colour_errors_show_a_washed_out_reconstruction():
    from mmtok.eval.vq_eval import colour_errors

    original = torch.rand(4, 3, 16, 16) * 2 - 1
    grey = original.mean(1, keepdim=True)
    washed = grey + 0.5 * (original - grey)
    errors = colour_errors(washed, original)
    assert errors["saturation_ratio"] < 0.8 and len(errors["mae_rgb"]) == 3
    assert colour_errors(original, original)["mae_rgb"] == [0.0, 0.0, 0.0]


def test_evaluation_records_of_other_runs_are_kept(tmp_path):
    from mmtok.eval.vq_eval import merge_results

    path = tmp_path / "vq_eval.json"
    old = [{"tokenizer": "a", "image_size": 64, "psnr": 1}, {"tokenizer": "b", "image_size": 64, "psnr": 2}]
    path.write_text(json.dumps(old))
    merged = merge_results(path, [{"tokenizer": "b", "image_size": 64, "psnr": 3}])
    assert merged == [old[0], {"tokenizer": "b", "image_size": 64, "psnr": 3}]


def test_the_stage2_table_shows_usage_on_photos_and_digits_apart(tmp_path, monkeypatch):
    """vq_stage2 gathers each arm's vq_eval row with its usage on photo crops and on digits alone (72% of vq_eval's
    tokens are digits, so its one usage figure can rise while photos use fewer codes)."""
    from mmtok.eval.tools import vq_stage2

    configs, runs = tmp_path / "configs", tmp_path / "runs"
    configs.mkdir()
    (configs / "digits40.toml").write_text("# vq-photo-256 stage-2 arm: 40% digits.\n[train]\n")
    monkeypatch.setattr(vq_stage2, "CONFIGS", configs)
    monkeypatch.setattr(vq_stage2, "RUNS", runs)
    monkeypatch.setattr(vq_stage2, "STAGE1", tmp_path / "stage1")
    (runs / "logs").mkdir(parents=True)
    (runs / "digits40").mkdir()
    (runs / "digits40" / "train_log.jsonl").write_text('{"step": 0, "seconds": 1.0}\n{"step": 600, "seconds": 90.5}\n')
    metrics = {key: 0.5 for key, _, _ in vq_stage2.COLUMNS}
    for arm, photos, digits in (("stage1", 0.705, 0.603), ("digits40", 0.613, 0.742)):
        (runs / "logs" / f"{arm}.eval.json").write_text(json.dumps([{**metrics, "codebook_usage": 0.9}]))
        labels = vq_stage2.USAGE_ROWS.values()
        usage = {label: {"codebook_usage": value} for label, value in zip(labels, (photos, digits), strict=True)}
        (runs / "logs" / f"{arm}.usage.json").write_text(json.dumps({"rows": usage}))
    assert vq_stage2.arms() == ["stage1", "digits40"]
    rows = [vq_stage2.collect_arm(arm) for arm in vq_stage2.arms()]
    assert rows[1]["changes"] == "vq-photo-256 stage-2 arm: 40% digits." and rows[1]["train_wall_s"] == 90.5
    table = vq_stage2.table(rows).splitlines()
    assert "usage, photo crops alone" in table[0] and table[2].endswith("| 70.5% | 60.3% |")
    assert table[3].startswith("| digits40 |") and table[3].endswith("| 61.3% | 74.2% |")
    assert vq_stage2.collect_arm("missing") is None
