"""Audio/video embedder: token rates, streaming, time alignment of audio and video events, decoding, awkward and
bad inputs, long inputs (chunked positions), training and the CLI — on a small untrained-but-initialised model."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import MediaError, TokenError
from mmtok.models.av import AVConfig, AVTokenizer
from mmtok.samples import manifest, sample_path
from tests.makers import write_audio_only_mp4, write_video, write_wav


@pytest.fixture(scope="module")
def tok():
    torch.manual_seed(0)
    model = AVTokenizer(AVConfig(d_model=64, codebook_size=32, decoder_hidden=64, griffin_lim_iters=4), name="av-test")
    model.train()  # in training mode, the first batch k-means-initialises the codebook
    features = model.audio_token_features(mmtok.load(sample_path("speech.wav")), 16.0)
    model.quantize(model.content("audio", features))
    return model.eval()


@pytest.mark.parametrize("rate", [12.5, 16.0, 50.0])
def test_audio_tokens_follow_the_token_rate(tok, samples, rate):
    seq = tok.encode(samples / "speech.wav", tokens_per_second=rate)
    assert len(seq) == math.ceil(3.4385 * rate)
    assert seq.modality == "audio" and seq.ids is not None and seq.embeddings.shape == (len(seq), 64)
    assert torch.allclose(seq.times[:3], torch.tensor([0, 1 / rate, 2 / rate], dtype=torch.float64))


def test_streaming_in_blocks_gives_identical_features(tok, samples):
    audio = mmtok.load(samples / "speech.flac")
    whole = tok.audio_token_features(audio, 16.0, block_seconds=100)
    pieces = tok.audio_token_features(audio, 16.0, block_seconds=0.37)
    assert torch.equal(whole, pieces)


def test_video_with_sound_gives_two_time_aligned_streams(tok, samples):
    streams = tok.encode_streams(samples / "clip.mp4")
    assert set(streams) == {"video", "audio"}
    video, audio = streams["video"], streams["audio"]
    assert len(video) == 48 and len(audio) == 48  # 3 s at 16 tokens/s each
    assert torch.equal(video.times, audio.times)
    # the same instant has the same time-position embedding in both streams
    pos = tok.position_embedding(torch.arange(48))
    strip = {
        m: seq.embeddings - tok.modality_embedding(torch.full((48,), i))
        for i, (m, seq) in enumerate((("audio", audio), ("video", video)))
    }
    content = {
        "audio": tok.codebook.get_output_from_indices(audio.ids[None])[0],
        "video": tok.codebook.get_output_from_indices(video.ids[None])[0],
    }
    for m in ("audio", "video"):
        assert torch.allclose(strip[m] - content[m], pos, atol=1e-5)


def test_motion_and_sound_events_sit_at_the_same_token_positions(tok, samples):
    """clip.mp4: a square sweeps across the frame while an 880 Hz tone sounds, at known times."""
    events = manifest()["clip.mp4"]["events_s"]
    rate = 16.0
    clip = mmtok.load(samples / "clip.mp4")
    motion = tok.video_token_features(clip, rate)[:, : 32 * 32].abs().sum(1)  # motion energy per token
    sound = tok.audio_token_features(clip.audio, rate).reshape(-1, 4, 80).exp().sum((1, 2))  # mel energy per token
    expected = {round(t * rate) + k for t in events for k in range(1, 3)}
    moving = set((motion > motion.max() * 0.3).nonzero().flatten().tolist())
    loud = set((sound > sound.max() * 0.3).nonzero().flatten().tolist())
    assert expected <= moving and expected <= loud
    assert moving <= {round(t * rate) + k for t in events for k in range(0, 6)}
    assert loud <= {round(t * rate) + k for t in events for k in range(0, 6)}


def test_audio_decodes_to_a_waveform_of_the_same_length(tok, samples):
    seq = tok.encode(samples / "speech.wav")
    audio = tok.decode(seq)
    assert audio.sample_rate_hz == 16000 and abs(audio.duration_s - 3.4385) < 0.01
    continuous = tok.encode(samples / "speech.wav", quantize=False)
    assert continuous.ids is None and tok.decode(continuous).num_samples == audio.num_samples


def test_video_tokens_do_not_decode_to_pixels(tok, samples):
    seq = tok.encode(samples / "clip.mp4")
    with pytest.raises(TokenError, match="only audio tokens decode"):
        tok.decode(seq)
    assert tok.decode_features(seq).shape == (48, 32 * 32 + 48)


@pytest.mark.parametrize(("rate_hz", "channels"), [(8000, 1), (48000, 2), (96000, 6)])
def test_any_rate_and_channel_count(tok, tmp_path, rate_hz, channels):
    t = np.arange(rate_hz) / rate_hz
    wave = np.stack([0.3 * np.sin(2 * np.pi * 300 * (c + 1) * t) for c in range(channels)], axis=1)
    seq = tok.encode(write_wav(tmp_path / "x.wav", wave.astype(np.float32), rate_hz))
    assert len(seq) == 16


def test_silence_and_clipping_are_tokenized(tok, tmp_path):
    assert len(tok.encode(write_wav(tmp_path / "s.wav", np.zeros(16000, np.float32)))) == 16
    clipped = np.clip(3 * np.sin(np.arange(16000) / 5), -1, 1).astype(np.float32)
    assert len(tok.encode(write_wav(tmp_path / "c.wav", clipped))) == 16


def test_a_10ms_clip_gives_one_token(tok, tmp_path):
    assert len(tok.encode(write_wav(tmp_path / "short.wav", np.full(160, 0.1, np.float32)))) == 1


def test_nan_samples_are_refused(tok, tmp_path):
    wave = np.zeros(1600, np.float32)
    wave[10] = np.nan
    with pytest.raises(MediaError, match="NaN or infinite"):
        tok.encode(write_wav(tmp_path / "nan.wav", wave, subtype="FLOAT"))


def test_video_without_audio_and_audio_without_video(tok, tmp_path):
    silent = write_video(tmp_path / "silent.mkv", [i / 10 for i in range(20)])
    assert set(tok.encode_streams(silent)) == {"video"}
    voice = write_audio_only_mp4(tmp_path / "voice.mp4")
    assert set(tok.encode_streams(voice)) == {"audio"}


def test_variable_frame_rate_video_gives_evenly_spaced_tokens(tok, tmp_path):
    vfr = write_video(tmp_path / "vfr.mkv", [0.0, 0.1, 0.15, 0.4, 0.45, 0.9, 1.0])
    seq = tok.encode(vfr, tokens_per_second=10)
    assert torch.allclose(seq.times, torch.arange(len(seq), dtype=torch.float64) / 10)


def test_corrupt_streams_give_media_errors(tok, tmp_path, samples):
    cut = tmp_path / "cut.mp4"
    cut.write_bytes((samples / "clip.mp4").read_bytes()[:4000])
    with pytest.raises(MediaError):
        tok.encode_streams(cut)
    junk = tmp_path / "junk.flac"
    junk.write_bytes(b"fLaC" + bytes(range(256)) * 20)
    with pytest.raises(MediaError):
        tok.encode(junk)


def test_long_inputs_are_chunked_never_truncated(tok):
    audio = mmtok.Audio.from_tensor(0.1 * torch.randn(16000 * 20), 16000)  # 20 s -> 320 tokens
    seq = tok.encode(audio)
    assert len(seq) == 320 and float(seq.times[-1]) == pytest.approx(319 / 16)
    content = tok.codebook.get_output_from_indices(seq.ids[None])[0]
    positional = seq.embeddings - content - tok.modality_embedding(torch.zeros(320, dtype=torch.long))
    assert torch.allclose(positional[256], positional[0], atol=1e-5)  # positions restart at the 256th token
    assert torch.allclose(positional[257], tok.position_embedding(torch.tensor(1)), atol=1e-5)


def test_training_a_few_steps(tmp_path):
    from mmtok.models.train_av import train_av

    config = tmp_path / "av.toml"
    config.write_text(f"""
[model]
d_model = 32
codebook_size = 16
decoder_hidden = 32
train_rates = [16.0, 25.0]
[train]
steps = 4
audio_tokens = 64
video_tokens = 32
speech_limit = 3
video_clips = 2
log_every = 2
out = "{tmp_path / "run"}"
name = "av-run"
""")
    folder = train_av(config, device="cpu")
    log = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [2, 4] and "audio_codes" in log[0]
    trained = mmtok.get_tokenizer(folder)
    assert trained.config.d_model == 32 and float(trained.audio_std.mean()) != 1.0  # statistics were fitted


def test_cli_tokenize_video_and_detokenize_its_sound(tok, tmp_path, samples):
    folder = tmp_path / "av"
    tok.save_pretrained(folder)
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "tokenize",
            str(samples / "clip.mp4"),
            "--av-tokenizer",
            str(folder),
            "--out",
            str(tmp_path / "tokens"),
            "--json",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["stream"] for r in rows} == {"video", "audio"} and all(r["tokens"] == 48 for r in rows)
    out = tmp_path / "sound.wav"
    back = runner.invoke(
        app, ["detokenize", rows[0]["file"], "--out", str(out), "--tokenizer", str(folder), "--device", "cpu"]
    )
    assert back.exit_code == 0, back.output
    assert mmtok.load(out).duration_s == pytest.approx(3.0, abs=0.05)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("speech.wav", "clip.webm"):
        shutil.copy(samples / name, mixed / name)
    both = runner.invoke(
        app, ["tokenize", str(mixed), "--av-tokenizer", str(folder), "--out", str(tmp_path / "t2"), "--device", "cpu"]
    )
    assert both.exit_code == 0, both.output
    assert sorted(p.name for p in (tmp_path / "t2" / "mixed").iterdir()) == ["clip.safetensors", "speech.safetensors"]


def test_a_rate_or_level_count_the_tokenizer_cannot_give_is_refused_never_replaced(tok, samples):
    """0 tokens/s once fell back to the default, 500/s ran at ~166/s (the mel hop was clamped at 16 samples) with
    500/s in its times, and 9 codebook levels gave 8."""
    speech = samples / "speech.wav"
    for rate in (0, -1, 0.5, 1e-9, 251, 500, float("nan")):
        with pytest.raises(TokenError, match="tokens_per_second must be from 1 to 250"):
            tok.encode(speech, tokens_per_second=rate)
    assert len(tok.encode(speech, tokens_per_second=250)) == pytest.approx(250 * 3.4375, abs=2)
    for levels in (0, 9):
        with pytest.raises(TokenError, match="codebook levels must be 1 to 8"):
            tok.encode(speech, codebook_levels=levels)
