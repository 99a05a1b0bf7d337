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


def test_truncated_jpeg_is_refused_at_load_although_its_header_is_intact(samples, tmp_path):
    """Cut in half, the header still reads 451x300; inspect and price used to report it as a good image."""
    path = tmp_path / "cut.jpg"
    data = (samples / "chelsea.jpg").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_media_error(path, r"truncated: JPEG has no end-of-image marker \(FF D9\)")


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


@pytest.mark.timeout(20)
def test_fifo_is_refused_before_it_is_opened(tmp_path, monkeypatch):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    opened: list = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *args, **kwargs: opened.append(path) or real_open(path, *args, **kwargs)
    )
    assert_media_error(fifo, r"is a FIFO \(named pipe\), not a regular file")
    assert opened == []


def test_devices_are_refused_before_they_are_opened():
    assert_media_error(Path("/dev/null"), "is a character device, not a regular file")


@pytest.mark.timeout(20)
def test_scan_reports_a_fifo_in_a_folder_and_goes_on(samples, tmp_path):
    os.mkfifo(tmp_path / "a-pipe.wav")
    shutil.copy(samples / "chelsea.jpg", tmp_path / "b.jpg")
    results = list(mmtok.scan([tmp_path]))
    assert isinstance(results[0], MediaError) and results[0].source == str(tmp_path / "a-pipe.wav")
    assert results[0].reason == "is a FIFO (named pipe), not a regular file; only regular files are read"
    assert results[1].kind == "image"


def _deny(monkeypatch, folder: Path) -> None:
    """chmod 000 on ``folder``; where that does not stop this process (root), its listing fails as it would."""
    folder.chmod(0o000)
    if os.access(folder, os.R_OK):
        real_scandir = os.scandir

        def scandir(path="."):
            if Path(path) == folder:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)


def test_an_unreadable_subfolder_is_an_error_naming_it(samples, tmp_path, monkeypatch):
    """It used to be skipped silently: a scan of 1,000 photos with one locked folder looked complete."""
    (tmp_path / "a").mkdir()
    (tmp_path / "locked").mkdir()
    (tmp_path / "z").mkdir()
    for folder in ("a", "locked", "z"):
        shutil.copy(samples / "chelsea.jpg", tmp_path / folder / "photo.jpg")
    _deny(monkeypatch, tmp_path / "locked")
    try:
        results = list(mmtok.scan([tmp_path]))
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert [type(r).__name__ for r in results] == ["Image", "MediaError", "Image"]
    assert str(results[1]) == f"{tmp_path / 'locked'}: cannot read folder: Permission denied"


def test_an_unreadable_top_folder_is_an_error_naming_it(tmp_path, monkeypatch):
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "x.jpg").write_bytes(b"whatever")
    _deny(monkeypatch, tmp_path / "locked")
    try:
        results = list(mmtok.iter_files([tmp_path / "locked"]))
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert len(results) == 1 and str(results[0]) == f"{tmp_path / 'locked'}: cannot read folder: Permission denied"


def test_unreadable_folders_and_files_are_reported_by_the_kernel_too(samples, tmp_path):
    """The same without simulation: the scan runs in a child that file modes apply to, even as root."""
    (tmp_path / "locked").mkdir()
    (tmp_path / "open").mkdir()
    shutil.copy(samples / "chelsea.jpg", tmp_path / "locked" / "hidden.jpg")
    shutil.copy(samples / "chelsea.jpg", tmp_path / "open" / "fine.jpg")
    shutil.copy(samples / "chelsea.jpg", tmp_path / "open" / "locked.jpg")
    (tmp_path / "open" / "locked.jpg").chmod(0o000)
    (tmp_path / "locked").chmod(0o000)
    code = (
        "import mmtok, sys\n"
        "for r in mmtok.scan([sys.argv[1]]):\n"
        "    print(r if isinstance(r, mmtok.MediaError) else r.path)\n"
    )
    preexec = _without_file_permission_override if os.geteuid() == 0 else None
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True, preexec_fn=preexec
        ).stdout
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert out.splitlines() == [
        f"{tmp_path / 'locked'}: cannot read folder: Permission denied",
        str(tmp_path / "open" / "fine.jpg"),
        f"{tmp_path / 'open' / 'locked.jpg'}: permission denied: the file is not readable",
    ]


def test_an_audio_stream_whose_frames_change_format_midway_is_one_media_error(tmp_path):
    """One byte put into speech.mp3 (found by test_media_fuzz's random corruptions) makes a frame whose sample
    format differs from the stream's first: PyAV's resampler refused it with a ValueError, a crash of mmtok."""
    original = mmtok.sample_path("speech.mp3").read_bytes()
    path = tmp_path / "speech.mp3"
    path.write_bytes(original[:875] + b"\xbb" + original[875:])
    with pytest.raises(MediaError, match=r"speech\.mp3: audio stream changes its sample format, layout or rate midway"):
        mmtok.load(path).samples()
