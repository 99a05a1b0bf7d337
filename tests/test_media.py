"""mmtok.load(): kinds by content, metadata from headers, lazy decoding of every media type."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import PIL.Image
import PIL.ImageOps
import pytest
import torch

import mmtok
from mmtok.media import Audio, Image, Text, Video
from tests.makers import write_image, write_video


@pytest.mark.parametrize(
    ("name", "kind", "fmt"),
    [
        ("astronaut.png", "image", "png"),
        ("chelsea.jpg", "image", "jpeg"),
        ("coffee.webp", "image", "webp"),
        ("speech.wav", "audio", "wav"),
        ("speech.flac", "audio", "flac"),
        ("speech.ogg", "audio", "ogg"),
        ("speech.mp3", "audio", "mp3"),
        ("speech.m4a", "audio", "m4a"),
        ("clip.mp4", "video", "mp4"),
        ("clip.webm", "video", "webm"),
        ("note.txt", "text", "utf-8"),
    ],
)
def test_every_sample_loads_as_its_kind(samples, name, kind, fmt):
    media = mmtok.load(samples / name)
    assert media.kind == kind
    assert media.format == fmt
    assert media.size_bytes == (samples / name).stat().st_size


def test_kind_comes_from_content_not_extension(samples, tmp_path):
    disguised = tmp_path / "photo.wav"
    shutil.copy(samples / "astronaut.png", disguised)
    media = mmtok.load(disguised)
    assert isinstance(media, Image)
    assert (media.width, media.height) == (384, 384)


def test_image_metadata_matches_pillow_with_exif_orientation(samples):
    media = mmtok.load(samples / "rocket_rotated.jpg")
    with PIL.Image.open(samples / "rocket_rotated.jpg") as im:
        stored = im.size
        displayed = PIL.ImageOps.exif_transpose(im).size
    assert stored == (427, 640)
    assert (media.width, media.height) == displayed == (640, 427)
    assert media.orientation == 6


def test_image_decodes_to_uint8_rgb_with_orientation_applied(samples):
    pixels = mmtok.load(samples / "rocket_rotated.jpg").to_tensor()
    assert pixels.dtype == torch.uint8
    assert pixels.shape == (3, 427, 640)
    with PIL.Image.open(samples / "rocket_rotated.jpg") as im:
        expected = np.array(PIL.ImageOps.exif_transpose(im).convert("RGB"))
    assert torch.equal(pixels, torch.from_numpy(expected).permute(2, 0, 1))


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "I;16"])
def test_grayscale_alpha_and_palette_images_decode_to_rgb(tmp_path, mode):
    path = write_image(tmp_path / "x.png", (40, 30), "PNG", mode=mode)
    pixels = mmtok.load(path).to_tensor()
    assert pixels.shape == (3, 30, 40)
    assert pixels.dtype == torch.uint8


def test_transparent_pixels_are_composited_over_white(tmp_path):
    path = tmp_path / "clear.png"
    PIL.Image.new("RGBA", (8, 8), (0, 0, 0, 0)).save(path)
    assert int(mmtok.load(path).to_tensor().min()) == 255


def test_jpeg_draft_decodes_large_photo_at_reduced_scale(tmp_path):
    path = write_image(tmp_path / "big.jpg", (2048, 1536), "JPEG")
    small = mmtok.load(path).to_tensor(draft_size=(256, 192))
    assert small.shape[1:] == (192, 256)  # 1/8 DCT scale, not the full 1536 x 2048


def test_in_memory_image_round_trips():
    pixels = torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8)
    image = Image.from_tensor(pixels)
    assert (image.width, image.height) == (7, 5)
    assert torch.equal(image.to_tensor(), pixels)
    assert torch.equal(Image.from_pil(image.to_pil()).to_tensor(), pixels)


@pytest.mark.parametrize("name", ["speech.wav", "speech.flac", "speech.ogg", "speech.mp3", "speech.m4a"])
def test_audio_decodes_to_float_channels_by_samples(samples, name):
    audio = mmtok.load(samples / name)
    assert (audio.sample_rate_hz, audio.channels) == (16000, 1)
    assert audio.duration_s == pytest.approx(3.44, abs=0.05)
    wave = audio.waveform()
    assert wave.dtype == torch.float32
    assert wave.shape[0] == 1
    assert abs(wave.shape[1] - audio.num_samples) < 2048  # codec priming/padding only
    assert 0.5 < float(wave.abs().max()) <= 1.0


def test_lossless_codecs_decode_identically(samples):
    wav = mmtok.load(samples / "speech.wav").waveform()
    flac = mmtok.load(samples / "speech.flac").waveform()
    assert torch.equal(wav, flac)


def test_audio_resamples_and_downmixes(tmp_path):
    t = np.arange(48000) / 48000
    stereo = np.stack([np.sin(2 * np.pi * 440 * t), 0.5 * np.sin(2 * np.pi * 440 * t)], axis=1)
    from tests.makers import write_wav

    audio = mmtok.load(write_wav(tmp_path / "s.wav", stereo.astype(np.float32), 48000))
    assert audio.channels == 2
    wave = audio.waveform(sample_rate_hz=16000, mono=True)
    assert wave.shape == (1, 16000)
    peak_bin = int(torch.fft.rfft(wave[0]).abs().argmax())
    assert peak_bin == 440  # 1 Hz bins over one second


def test_in_memory_audio():
    audio = Audio.from_tensor(torch.zeros(16000), 16000)
    assert audio.duration_s == 1.0
    assert audio.waveform().shape == (1, 16000)


def test_video_metadata_and_its_audio_track(samples):
    video = mmtok.load(samples / "clip.mp4")
    assert isinstance(video, Video)
    assert (video.width, video.height, video.fps, video.frame_count) == (320, 240, 24.0, 72)
    assert video.duration_s == pytest.approx(3.0, abs=0.02)
    assert video.audio is not None and video.audio.codec == "aac"
    assert video.audio.waveform().shape[1] == pytest.approx(3.0 * 44100, rel=0.02)


@pytest.mark.parametrize("name", ["clip.mp4", "clip.webm"])
def test_video_frames_stream_in_chunks_at_the_requested_rate(samples, name):
    video = mmtok.load(samples / name)
    chunks = list(video.frames(fps=16, size=(80, 60), chunk_frames=10))
    assert all(len(c.times) <= 10 for c in chunks)
    times = torch.cat([c.times for c in chunks])
    frames = torch.cat([c.frames for c in chunks])
    assert frames.shape[1:] == (3, 60, 80) and frames.dtype == torch.uint8
    assert len(times) == 48  # 3 s at 16 fps
    assert torch.allclose(times, torch.arange(48, dtype=torch.float64) / 16)


def test_variable_frame_rate_video_is_sampled_by_presentation_time(tmp_path):
    shown_at = [0.0, 0.1, 0.15, 0.4, 0.45, 0.9]
    video = mmtok.load(write_video(tmp_path / "vfr.mkv", shown_at))
    chunks = list(video.frames(fps=10))
    times = torch.cat([c.times for c in chunks]).tolist()
    brightness = torch.cat([c.frames for c in chunks]).float().mean(dim=(1, 2, 3))
    shown_index = [round(float(b) / 8) for b in brightness]
    expected = [max(i for i, s in enumerate(shown_at) if s <= t + 1e-9) for t in times]
    assert times[:5] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert shown_index == expected


def test_text_file_and_string(samples):
    text = mmtok.load(samples / "note.txt")
    assert isinstance(text, Text)
    assert text.text.startswith("mmtok sample note.")
    assert Text.from_string("héllo").size_bytes == 6


def test_scan_walks_folders_recursively_and_reports_bad_items(samples, tmp_path):
    (tmp_path / "sub").mkdir()
    shutil.copy(samples / "chelsea.jpg", tmp_path / "sub" / "a.jpg")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 3)
    (tmp_path / ".hidden.jpg").write_bytes(b"junk")
    results = list(mmtok.scan([tmp_path]))
    assert [type(r).__name__ for r in results] == ["MediaError", "Image"]
    assert "broken.png" in str(results[0])


def test_import_mmtok_does_not_import_torch():
    import subprocess

    code = "import sys, mmtok; mmtok.load; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("name", ["clip.mp4", "clip.webm", "speech.m4a", "speech.mp3", "speech.ogg"])
def test_decoded_audio_has_the_declared_length_in_one_piece_or_in_blocks(samples, name):
    """AAC pads its last frame (clip.mp4 decodes to 133,120 samples for 132,300 declared); the padding is dropped,
    so audio and video streams of one file stay time-aligned, and streaming gives the same samples as decoding."""
    media = mmtok.load(samples / name)
    audio = media.audio if isinstance(media, Video) else media
    whole = audio.waveform()
    # WebM's header rounds its duration up to the next millisecond-ish cluster: decoded is never longer than declared
    assert audio.num_samples - audio.sample_rate_hz // 100 <= whole.shape[1] <= audio.num_samples
    streamed = torch.cat(list(audio.blocks(0.25, mono=False)), dim=1)
    # Ogg goes through libsndfile in waveform() and FFmpeg in blocks(): same samples up to decoder rounding
    assert streamed.shape == whole.shape and torch.allclose(streamed, whole, atol=1e-3)
    at_16k = sum(block.shape[1] for block in audio.blocks(0.1, 16_000))
    assert abs(at_16k - whole.shape[1] * 16_000 / audio.sample_rate_hz) <= 2
    if name == "clip.mp4":
        assert whole.shape[1] == audio.num_samples == 132_300


def test_scan_of_one_path_as_a_string_is_that_path_not_its_letters(samples):
    assert [m.kind for m in mmtok.scan(str(samples / "chelsea.jpg"))] == ["image"]
    assert [m.kind for m in mmtok.scan(samples / "chelsea.jpg")] == ["image"]


def test_a_decoders_warning_names_the_file(tmp_path, monkeypatch):
    """Pillow's DecompressionBombWarning (and a corrupt-EXIF warning) did not say which file of a batch it was."""
    import PIL.Image

    path = tmp_path / "big-ish.png"
    PIL.Image.new("RGB", (40, 40), (1, 2, 3)).save(path)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)  # 1,600 pixels: over Pillow's limit, under twice it
    with pytest.warns(PIL.Image.DecompressionBombWarning, match=r"big-ish\.png: Image size \(1600 pixels\)"):
        mmtok.load(path).to_pil()


def test_tokenize_names_the_input_in_an_audio_or_video_decoders_warning(samples, tmp_path, monkeypatch):
    """A warning raised while a sound or video file is tokenized (torchaudio's, a resampler's) is one line naming
    the file; an image decoder's, already named, is not named twice."""
    import warnings

    import PIL.Image
    from typer.testing import CliRunner

    from mmtok.cli.main import app
    from mmtok.models.av import AVTokenizer

    encode_streams = AVTokenizer.encode_streams

    def warning_encode(self, *args, **kwargs):
        warnings.warn("resampling from 8000 Hz", UserWarning, stacklevel=2)
        return encode_streams(self, *args, **kwargs)

    monkeypatch.setattr(AVTokenizer, "encode_streams", warning_encode)
    image = tmp_path / "big-ish.png"
    PIL.Image.new("RGB", (40, 40), (1, 2, 3)).save(image)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)
    result = CliRunner().invoke(app, ["tokenize", str(samples / "speech.wav"), str(image), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert any(line.endswith("speech.wav: resampling from 8000 Hz") for line in lines), lines
    bomb = [line for line in lines if "DecompressionBombWarning" in line]
    assert len(bomb) == 1 and bomb[0].count("big-ish.png") == 1, lines


@pytest.mark.parametrize("suffix", [".avif", ".heic"])
def test_avif_and_heic_photos_load_price_and_tokenize(samples, tmp_path, suffix):
    """AVIF (web photos; Pillow reads it) and HEIC (iPhone photos; pillow-heif) were taken for MP4 by their ftyp box
    and refused as 'video stream has no frames'."""
    import PIL.Image
    import pillow_heif
    from typer.testing import CliRunner

    from mmtok.cli.main import app

    pillow_heif.register_heif_opener()
    original = mmtok.load(samples / "chelsea.jpg")
    path = tmp_path / f"chelsea{suffix}"
    PIL.Image.open(samples / "chelsea.jpg").save(path, quality=90)
    photo = mmtok.load(path)
    assert (photo.kind, photo.format) == ("image", suffix[1:].replace("heic", "heif"))
    assert (photo.width, photo.height) == (original.width, original.height)
    error = (photo.to_tensor().float() - original.to_tensor().float()).abs().mean()
    assert error < 6, error  # the same photo, through a lossy encoder
    result = CliRunner().invoke(app, ["price", "--json", "-m", "gpt-4o", str(path), str(samples / "chelsea.jpg")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert rows[0]["input_tokens"] == rows[1]["input_tokens"] == 255 and rows[0]["item"] == str(path)
    result = CliRunner().invoke(app, ["tokenize", str(path), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0 and (tmp_path / "t" / "chelsea.safetensors").is_file(), result.output
    assert mmtok.load(samples / "clip.mp4").kind == "video"  # the same ftyp box with a video brand


def test_a_matroska_recording_without_a_duration_is_measured_by_its_packets(tmp_path):
    """A live-mode (or unfinished) Matroska recording states no duration: it was refused as 'audio stream has no
    duration'; its streams' spans are now read from their packets, without decoding."""
    from tests.makers import write_video

    live = write_video(
        tmp_path / "live.mkv", [i / 24 for i in range(72)], fmt="matroska", audio_rate=16000, audio_seconds=3.0,
        options={"live": "1"},
    )  # fmt: skip
    import av

    with av.open(str(live)) as container:
        assert container.duration is None and all(s.duration is None for s in container.streams)
    video = mmtok.load(live)
    assert video.kind == "video" and video.duration_s == pytest.approx(3.0, abs=0.05)
    assert video.audio is not None and video.audio.duration_s == pytest.approx(3.0, abs=0.1)
    tokens = mmtok.get_tokenizer("av-tiny").encode_streams(live)
    assert len(tokens["video"]) == 48 and len(tokens["audio"]) in (48, 49)


def _ftyp(major: bytes, compatible: list[bytes]) -> bytes:
    body = major + b"\0\0\0\0" + b"".join(compatible)
    return (8 + len(body)).to_bytes(4, "big") + b"ftyp" + body + b"\0" * 64


@pytest.mark.parametrize(
    ("major", "compatible", "expected"),
    [
        (b"heic", [b"mif1", b"heic"], "heif"),  # iPhone
        (b"heix", [b"mif1", b"heix"], "heif"),  # Canon .hif
        (b"heic", [b"avif", b"heic"], "heif"),  # the major brand decides
        (b"avif", [b"avif", b"mif1", b"miaf"], "avif"),
        (b"mif1", [b"avif", b"mif1"], "avif"),  # the generic image brand defers to the codec's
        (b"msf1", [b"msf1", b"iso8"], None),  # a HEIF image sequence without an image brand: a video track
        (b"isom", [b"isom", b"mif1", b"heic"], None),  # an MP4 listing image brands among others
        (b"isom", [b"isom", b"avc1"], None),
    ],
)
def test_iso_media_brands_name_images_and_leave_videos(major, compatible, expected):
    from mmtok.headers import image_format

    assert image_format(_ftyp(major, compatible)) == expected


def test_an_avif_branded_mif1_decodes_after_a_heic_was_opened(samples, tmp_path):
    """pillow-heif's opener also claims mif1 files and cannot decode AV1: each format opens with its own plugin."""
    import pillow_heif

    pillow_heif.register_heif_opener()
    heic, avif = tmp_path / "a.heic", tmp_path / "b.avif"
    PIL.Image.open(samples / "chelsea.jpg").save(heic, quality=80)
    PIL.Image.open(samples / "chelsea.jpg").save(avif, quality=80)
    data = avif.read_bytes()
    assert data[8:12] == b"avif"
    avif.write_bytes(data[:8] + b"mif1" + data[12:])  # the same file, branded as many encoders brand AVIF
    assert mmtok.load(heic).to_tensor().shape == mmtok.load(avif).to_tensor().shape == (3, 300, 451)
    assert mmtok.load(avif).format == "avif"


def test_a_heic_photo_shrinks_to_webp_not_png(samples, tmp_path):
    import pillow_heif
    from typer.testing import CliRunner

    from mmtok.cli.main import app

    pillow_heif.register_heif_opener()
    heic = tmp_path / "cat.heic"
    PIL.Image.open(samples / "chelsea.jpg").save(heic, quality=85)
    result = CliRunner().invoke(app, ["shrink", str(heic), "-m", "gpt-4o", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert [p.suffix for p in (tmp_path / "out").iterdir()] == [".webp"]


def test_a_files_warnings_still_show_when_tokenizing_it_then_fails(samples, tmp_path, monkeypatch):
    import warnings

    from typer.testing import CliRunner

    from mmtok.cli.main import app
    from mmtok.errors import MediaError
    from mmtok.models.av import AVTokenizer

    def failing_encode(self, media, *args, **kwargs):
        warnings.warn("resampling from 8000 Hz", UserWarning, stacklevel=2)
        raise MediaError(media.path, "audio stream is corrupt after 3 blocks")

    monkeypatch.setattr(AVTokenizer, "encode_streams", failing_encode)
    result = CliRunner().invoke(app, ["tokenize", str(samples / "speech.wav"), "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line]
    assert any(line.startswith("warning:") and line.endswith("speech.wav: resampling from 8000 Hz") for line in lines)
    assert any(line.startswith("error:") and "corrupt after 3 blocks" in line for line in lines), lines


def test_an_avif_declaring_more_pixels_than_pillow_decodes_is_refused_as_that_not_as_corrupt(tmp_path):
    """Its size comes from its ispe box, as a JPEG's from its frame header: over the limit it is refused at load;
    with the limit raised past what Pillow decodes, decoding it is refused naming Pillow's guard."""
    import struct

    from mmtok.errors import MediaError

    path = tmp_path / "huge.avif"
    PIL.Image.new("RGB", (64, 64), (20, 90, 200)).save(path)
    data = path.read_bytes()
    at = data.index(b"ispe") + 8  # the image spatial extents: version/flags, then width and height
    path.write_bytes(data[:at] + struct.pack(">II", 14000, 14000) + data[at + 8 :])
    with pytest.raises(MediaError, match=r"huge\.avif: 14000x14000 image has 196,000,000 pixels, above the limit"):
        mmtok.load(path)
    huge = mmtok.load(path, max_pixels=400_000_000)
    assert (huge.width, huge.height) == (14000, 14000)
    with pytest.raises(MediaError, match=r"huge\.avif: cannot decode avif image: .*196000000 pixels.*bomb"):
        huge.to_tensor()
