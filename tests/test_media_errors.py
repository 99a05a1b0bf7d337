"""Every class of bad input gives a MediaError that names the file and the reason; nothing else escapes."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import mmtok
from mmtok.errors import MediaError, MmtokError
from tests.makers import write_audio_only_mp4, write_wav


def assert_media_error(path: Path, match: str, **kwargs) -> MediaError:
    with pytest.raises(MediaError, match=match) as info:
        media = mmtok.load(path, **kwargs)
        _decode(media)
    assert str(path) in str(info.value)
    assert isinstance(info.value, MmtokError)
    return info.value


def _decode(media) -> None:
    if media.kind == "image":
        media.to_tensor()
    elif media.kind == "audio":
        media.waveform()
    elif media.kind == "video":
        for _ in media.frames(fps=4, size=(32, 24)):
            pass
    else:
        _ = media.text


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    assert_media_error(path, "empty file")


def test_truncated_jpeg_loads_header_but_refuses_to_decode(samples, tmp_path):
    path = tmp_path / "cut.jpg"
    data = (samples / "chelsea.jpg").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    image = mmtok.load(path)  # the header is intact: metadata works
    assert (image.width, image.height) == (451, 300)
    with pytest.raises(MediaError, match="cannot decode jpeg"):
        image.to_tensor()


def test_png_with_garbage_after_its_header(samples, tmp_path):
    data = bytearray((samples / "astronaut.png").read_bytes())
    data[200:260] = b"\xff" * 60
    path = tmp_path / "garbled.png"
    path.write_bytes(bytes(data))
    assert_media_error(path, "cannot decode png")


def test_corrupt_flac(samples, tmp_path):
    data = bytearray((samples / "speech.flac").read_bytes())
    path = tmp_path / "bad.flac"
    path.write_bytes(bytes(data[:42]) + os.urandom(2000))
    assert_media_error(path, "flac")


def test_truncated_mp4_without_its_index(samples, tmp_path):
    data = (samples / "clip.mp4").read_bytes()
    path = tmp_path / "cut.mp4"
    path.write_bytes(data[:5000])
    assert_media_error(path, "mp4")


def test_text_file_named_png(tmp_path):
    path = tmp_path / "photo.png"
    path.write_text("this is not a picture\n")
    assert_media_error(path, r"named \.png but the content is text, not an image")


def test_png_named_wav_is_an_image_but_not_the_audio_the_caller_expects(samples, tmp_path):
    path = tmp_path / "sound.wav"
    shutil.copy(samples / "astronaut.png", path)
    assert mmtok.load(path).kind == "image"
    assert_media_error(path, "expected audio, but the content is image", kind="audio")


def test_unsupported_container(tmp_path):
    path = tmp_path / "archive.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.txt", "hello")
    assert_media_error(path, "not a supported image, audio, video or text file")


def test_binary_junk_named_like_a_video(tmp_path):
    path = tmp_path / "movie.mp4"
    path.write_bytes(bytes(range(256)) * 8)
    assert_media_error(path, r"named \.mp4 but the content is not a readable video")


def _png_claiming(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk + b"\x00" * 64


def test_decompression_bomb_is_refused_before_decoding(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_claiming(50_000, 50_000))
    error = assert_media_error(path, "above the limit of 178,956,970")
    assert "50000x50000" in str(error)


def test_pixel_limit_is_configurable(samples):
    with pytest.raises(MediaError, match="above the limit of 100,000"):
        mmtok.load(samples / "astronaut.png", max_pixels=100_000)


def test_zero_length_audio(tmp_path):
    path = write_wav(tmp_path / "none.wav", np.zeros(0, dtype=np.float32))
    assert_media_error(path, "no samples")


def test_nan_and_inf_samples(tmp_path):
    wave = np.zeros(1600, dtype=np.float32)
    wave[100] = np.nan
    wave[200] = np.inf
    path = write_wav(tmp_path / "nan.wav", wave, subtype="FLOAT")
    assert_media_error(path, "NaN or infinite")


def test_mp4_without_a_video_stream_is_audio_not_video(tmp_path):
    path = write_audio_only_mp4(tmp_path / "voice.mp4")
    assert mmtok.load(path).kind == "audio"
    assert_media_error(path, "expected video, but the content is audio", kind="video")


def test_missing_path():
    assert_media_error(Path("/no/such/file.png"), "no such file")


def test_folder_is_not_a_file(tmp_path):
    assert_media_error(tmp_path, "is a folder")


def test_folder_with_no_media(tmp_path):
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x01")
    results = list(mmtok.scan([tmp_path]))
    assert len(results) == 1 and isinstance(results[0], MediaError)
    assert "folder contains no media files" in str(results[0])


def test_unknown_kind(samples):
    with pytest.raises(MediaError, match="unknown kind 'picture'"):
        mmtok.load(samples / "chelsea.jpg", kind="picture")


def test_invalid_utf8_beyond_the_sniffed_head(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"a" * 10_000 + b"\xff\xfe bad")
    assert_media_error(path, "not valid UTF-8")


def _without_file_permission_override() -> None:
    """In the child, as root: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH so file modes apply to it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(pr_capbset_drop, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_unreadable_file_reports_permission_denied(samples, tmp_path):
    """A real permission failure: the loader runs in a child process that cannot override file modes."""
    locked = tmp_path / "locked.jpg"
    shutil.copy(samples / "chelsea.jpg", locked)
    locked.chmod(0o000)
    code = "import mmtok, sys\ntry:\n    mmtok.load(sys.argv[1])\nexcept mmtok.MediaError as e:\n    print(e)\n"
    preexec = _without_file_permission_override if os.geteuid() == 0 else None
    out = subprocess.run(
        [sys.executable, "-c", code, str(locked)], capture_output=True, text=True, check=True, preexec_fn=preexec
    ).stdout
    assert out.strip() == f"{locked}: permission denied: the file is not readable"
