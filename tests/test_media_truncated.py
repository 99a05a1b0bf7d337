"""Files cut short after their header are refused at load (``truncated: ...``), without decoding: JPEG must hold
its end-of-image marker after the scan data, PNG its IEND chunk, WebP as many bytes as its RIFF header declares.
Data appended after the end (camera trailers, motion photos) is allowed, and only the tail is read for a whole file.
"""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import PIL.Image
import pytest
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import MediaError
from mmtok.headers import TAIL_BYTES, TruncatedError, check_image_end, image_format, read_image_header
from mmtok.samples import samples_dir
from tests.makers import write_image

ROOT = Path(__file__).resolve().parents[1]

# Real files written by Pillow (libjpeg, zlib, libwebp) in the variants cameras and tools produce.
VARIANTS = {
    "baseline.jpg": ("JPEG", "RGB", {"quality": 85}),
    "progressive.jpg": ("JPEG", "RGB", {"progressive": True, "quality": 90}),
    "optimized-exif.jpg": ("JPEG", "RGB", {"optimize": True, "orientation": 6}),
    "gray.jpg": ("JPEG", "L", {}),
    "cmyk.jpg": ("JPEG", "CMYK", {}),
    "rgb.png": ("PNG", "RGB", {}),
    "palette.png": ("PNG", "P", {}),
    "rgba-fast.png": ("PNG", "RGBA", {"compress_level": 1}),
    "lossy.webp": ("WEBP", "RGB", {"quality": 75}),
    "lossless.webp": ("WEBP", "RGBA", {"lossless": True}),
    "exif.webp": ("WEBP", "RGB", {"orientation": 8}),  # VP8X with an EXIF chunk after the image data
}


def _write(path: Path, fmt: str, mode: str, options: dict, size: tuple[int, int] = (320, 200)) -> Path:
    options = dict(options)
    orientation = options.pop("orientation", 1)
    write_image(path, size, fmt, orientation=orientation, mode=mode)
    if options:
        with PIL.Image.open(path) as im:
            im.load()
            exif = im.info.get("exif")
            im.save(path, format=fmt, **({"exif": exif} if exif else {}), **options)
    return path


def _header_end(data: bytes) -> int:
    """Where the header a size is read from ends: past it, a cut leaves the header intact."""
    fmt = image_format(data)
    if fmt == "png":
        return 8 + 25 + 8  # signature, IHDR, and the first chunk's length and type
    if fmt == "webp":
        return 30
    header = read_image_header(None, data, "jpeg")
    pos = header.body_offset
    while data[pos + 1] != 0xDA:  # walk to the scan header (SOS) and past it
        pos += 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]
    return pos + 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]


def _cuts(data: bytes) -> list[int]:
    start = _header_end(data)
    n = len(data)
    cuts = {start + 1, start + (n - start) // 4, start + (n - start) // 2, n - 100, n - 13, n - 12, n - 2, n - 1}
    return sorted(c for c in cuts if start < c < n)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_whole_pillow_files_load(tmp_path, name):
    path = _write(tmp_path / name, *VARIANTS[name])
    image = mmtok.load(path)
    assert (image.width, image.height) in ((320, 200), (200, 320))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_pillow_files_cut_after_their_header_are_truncated(tmp_path, name):
    """The reproduction: the header still gives a size (inspect and price used to pass), the file is cut."""
    data = _write(tmp_path / name, *VARIANTS[name]).read_bytes()
    cuts = _cuts(data)
    assert len(cuts) >= 5
    for cut in cuts:
        path = tmp_path / f"cut-{cut}-{name}"
        path.write_bytes(data[:cut])
        header = read_image_header(None, data[:cut][:4096], image_format(data))  # the header alone is intact
        assert header.stored_width in (320, 200)
        with pytest.raises(MediaError, match=r": truncated: ") as info:
            mmtok.load(path)
        assert info.value.source == str(path)
        if cut <= len(data) // 2:  # Pillow agrees (near the end it decodes a PNG without IEND, or a JPEG's EOI)
            with pytest.raises((OSError, SyntaxError, ValueError)), PIL.Image.open(path) as im:
                im.load()


def test_jpeg_cut_inside_its_headers_is_truncated(tmp_path):
    data = _write(tmp_path / "x.jpg", "JPEG", "RGB", {}).read_bytes()
    sof_end = read_image_header(None, data, "jpeg").body_offset
    for cut in (sof_end, sof_end + 3, _header_end(data) - 1):
        path = tmp_path / f"cut-{cut}.jpg"
        path.write_bytes(data[:cut])
        with pytest.raises(MediaError, match="truncated: JPEG ends after"):
            mmtok.load(path)


def test_messages_name_the_file_and_what_is_missing(tmp_path):
    jpeg = _write(tmp_path / "a.jpg", "JPEG", "RGB", {}).read_bytes()
    png = _write(tmp_path / "a.png", "PNG", "RGB", {}).read_bytes()
    webp = _write(tmp_path / "a.webp", "WEBP", "RGB", {}).read_bytes()
    cases = {
        "b.jpg": (jpeg[:-2], r"truncated: JPEG has no end-of-image marker \(FF D9\)"),
        "b.png": (png[:-12], "truncated: PNG has no IEND chunk"),
        "b.webp": (webp[:-1], f"truncated: WebP RIFF header declares {len(webp):,} bytes, but the file has"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(MediaError, match=message) as info:
            mmtok.load(tmp_path / name)
        assert str(info.value).startswith(f"{tmp_path / name}: truncated: ")


def test_a_thumbnail_end_marker_in_the_headers_does_not_count(tmp_path):
    """EXIF thumbnails are whole JPEGs, FF D9 included, inside APP1: the search starts after the scan header."""
    thumb = io.BytesIO()
    PIL.Image.new("RGB", (16, 16), (200, 10, 10)).save(thumb, "JPEG")
    main = _write(tmp_path / "m.jpg", "JPEG", "RGB", {}, size=(40, 30)).read_bytes()
    payload = b"Exif\x00\x00" + b"MM\x00\x2a\x00\x00\x00\x08\x00\x00" + thumb.getvalue()
    with_thumb = main[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + main[2:]
    assert len(with_thumb) < 4096  # the whole file is inside the tail window, thumbnail included
    (tmp_path / "whole.jpg").write_bytes(with_thumb)
    assert mmtok.load(tmp_path / "whole.jpg").width == 40
    (tmp_path / "cut.jpg").write_bytes(with_thumb[:-50])
    with pytest.raises(MediaError, match="truncated: JPEG has no end-of-image marker"):
        mmtok.load(tmp_path / "cut.jpg")


@pytest.mark.parametrize(
    ("name", "trailer"),
    [
        ("padded.jpg", b"\x00" * 600),  # encoders and copy tools padding to a block
        ("motion.jpg", b"ftypmp42" + b"\x01\x02\x03" * 40_000),  # a motion photo: a video after the JPEG's EOI
        ("samsung.jpg", b"\x00" * 64 + b"SEFH" + b"\x10" * 9000 + b"SEFT"),  # a camera's trailer, past the tail
        ("trailing.png", b"\x01" * 20_000),  # bytes after IEND
        ("trailing.webp", b"\x02" * 100),  # bytes after the RIFF chunk
    ],
)
def test_data_appended_after_the_end_is_allowed(tmp_path, name, trailer):
    fmt = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[name.rsplit(".", 1)[1]]
    path = _write(tmp_path / name, fmt, "RGB", {})
    path.write_bytes(path.read_bytes() + trailer)
    assert mmtok.load(path).width == 320


def test_a_cut_file_with_its_remainder_zero_filled_is_truncated(tmp_path):
    """A preallocated download that stopped: the right size on disk, zeros where the rest should be."""
    data = _write(tmp_path / "x.jpg", "JPEG", "RGB", {}, size=(640, 480)).read_bytes()
    cut = len(data) // 2
    (tmp_path / "x.jpg").write_bytes(data[:cut] + b"\x00" * (len(data) - cut))
    with pytest.raises(MediaError, match="truncated: JPEG"):
        mmtok.load(tmp_path / "x.jpg")


def test_a_whole_file_is_checked_by_reading_only_its_tail(tmp_path, monkeypatch):
    path = _write(tmp_path / "big.jpg", "JPEG", "RGB", {"quality": 95}, size=(1200, 900))
    size = path.stat().st_size
    assert size > 20 * TAIL_BYTES
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def counting_pread(fd, n, offset):
        reads.append((n, offset))
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    assert mmtok.load(path).width == 1200
    assert sum(n for n, _ in reads) <= TAIL_BYTES
    assert all(offset >= size - TAIL_BYTES for _, offset in reads)


def test_check_image_end_on_bytes_in_memory(tmp_path):
    data = _write(tmp_path / "x.png", "PNG", "RGB", {}, size=(20, 20)).read_bytes()
    assert len(data) < 4096
    check_image_end(None, data, "png", len(data))
    with pytest.raises(TruncatedError):
        check_image_end(None, data[:-1], "png", len(data) - 1)
    check_image_end(None, data[:100], "png", len(data))  # only part of the file at hand: nothing is claimed
    check_image_end(None, b"GIF89a" + b"\x00" * 20, "gif", 26)  # other formats are not checked


def _all_images() -> list[Path]:
    shipped = [p for p in samples_dir().iterdir() if p.suffix in (".jpg", ".png", ".webp")]
    in_repo = [p for p in (ROOT / "tests").rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp")]
    return sorted(shipped + in_repo)


def test_every_shipped_sample_still_loads():
    images = _all_images()
    assert len(images) >= 4
    for path in images:
        assert mmtok.load(path).kind == "image", path


runner = CliRunner()


def test_inspect_reports_a_truncated_file_in_one_line_and_exits_1(samples, tmp_path):
    data = (samples / "chelsea.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "whole.jpg").write_bytes(data)
    result = runner.invoke(app, ["inspect", "--json", str(tmp_path)])
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0]["path"] == str(tmp_path / "cut.jpg") and rows[0]["error"].startswith("truncated: JPEG")
    assert rows[1]["width"] == 451
    errors = [line for line in result.stderr.splitlines() if line]
    assert errors == [f"error: {tmp_path / 'cut.jpg'}: {rows[0]['error']}"]


def test_price_reports_a_truncated_file_in_one_line_and_exits_1(samples, tmp_path):
    data = (samples / "coffee.webp").read_bytes()
    (tmp_path / "cut.webp").write_bytes(data[: len(data) - 1000])
    result = runner.invoke(app, ["price", "--json", "-m", "gpt-4o", str(tmp_path / "cut.webp")])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line]
    assert len(errors) == 1 and "cut.webp: truncated: WebP RIFF header declares" in errors[0]


# ------------------------------------------------------------------------------------------ containers cut short
@pytest.fixture(scope="module")
def faststart(tmp_path_factory) -> tuple[Path, Path]:
    """A 10 s MP4 with its index first (what web encoders write), and the same file cut to its first third: the
    index still declares 10 s, the data stops after ~3 s."""
    from tests.makers import write_video

    root = tmp_path_factory.mktemp("faststart")
    whole = write_video(
        root / "whole.mp4", [i / 24 for i in range(240)], fmt="mp4", audio_rate=16000, audio_seconds=10.0,
        options={"movflags": "faststart"},
    )  # fmt: skip
    cut = root / "cut.mp4"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    return whole, cut


def test_a_faststart_mp4_cut_short_is_refused_at_load_by_its_own_index(faststart, tmp_path):
    """The index still declares 10 s; the first sample it places past the end of the file is where the data stops
    (audio at ~1.8 s here: the keyframe and the index fill the file's first bytes)."""
    whole, cut = faststart
    assert mmtok.load(whole).duration_s == pytest.approx(10.0, abs=0.1)
    with pytest.raises(MediaError, match=r"cut\.mp4: (audio|video) stream is cut short: it ends at \d\.\d\d s of"):
        mmtok.load(cut)
    nearly = tmp_path / "nearly.mp4"  # the last 1%: within what decoding also lets pass (CUT_SHORT_FRACTION)
    nearly.write_bytes(whole.read_bytes()[: int(whole.stat().st_size * 0.99)])
    assert mmtok.load(nearly).duration_s == pytest.approx(10.0, abs=0.1)
    for command in (["price", "-m", "gemini-2.5-flash"], ["inspect"]):
        result = CliRunner().invoke(app, [*command, str(whole), str(cut)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "cut.mp4" in errors[0] and "cut short" in errors[0], errors
    result = CliRunner().invoke(app, ["tokenize", str(whole), str(cut), "--out", str(tmp_path / "t")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cut.mp4" in errors[0] and "cut short" in errors[0]
    assert (tmp_path / "t" / "whole.safetensors").is_file() and not (tmp_path / "t" / "cut.safetensors").exists()


def test_a_container_cut_short_past_its_index_is_refused_when_decoded(faststart, monkeypatch):
    """Decoding holds the same rule for containers whose cut load cannot see (both load checks switched off)."""
    from mmtok.media import loading, reach

    monkeypatch.setattr(loading, "_check_index_in_file", lambda *args: None)
    monkeypatch.setattr(reach, "packets_reach", lambda *args: None)
    _, cut = faststart
    assert mmtok.load(cut).duration_s == pytest.approx(10.0, abs=0.1)  # the header still says 10 s
    with pytest.raises(
        MediaError, match=r"video stream is cut short: it ends at \d+\.\d+ s of the 9\.\d+ s its header"
    ):
        for _ in mmtok.load(cut).frames(fps=4):
            pass
    with pytest.raises(MediaError, match=r"audio stream is (cut short|corrupt)"):  # AAC stops mid-packet here
        for _ in mmtok.load(cut).audio.blocks(5.0):
            pass


def test_a_video_shorter_than_its_sound_track_is_not_taken_for_a_cut_file(tmp_path):
    from tests.makers import write_video

    for fmt, name in (("mp4", "v.mp4"), ("matroska", "v.mkv")):
        path = write_video(tmp_path / name, [i / 24 for i in range(48)], fmt=fmt, audio_rate=16000, audio_seconds=6.0)
        streams = mmtok.get_tokenizer("av-tiny").encode_streams(path)
        assert len(streams["video"]) >= 30 and len(streams["audio"]) >= 90  # 2 s of frames, 6 s of sound at 16/s


# --------------------------------------------------------------------------- headers that declare more than the file
def _forged_size(data: bytes, fmt: str, side: int) -> bytes:
    """``data`` with the size in its header set to ``side`` x ``side`` (the PNG's IHDR CRC made right again)."""
    import zlib

    if fmt == "png":
        ihdr = b"IHDR" + struct.pack(">II", side, side) + data[24:29]
        return data[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + data[33:]
    sof = next(data.find(bytes([0xFF, m]), 2) for m in (0xC0, 0xC2) if data.find(bytes([0xFF, m]), 2) > 0)
    return data[: sof + 5] + struct.pack(">HH", side, side) + data[sof + 9 :]


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_a_small_file_whose_header_declares_a_huge_image_is_refused_not_priced_as_that(tmp_path, fmt):
    """A 13,000 x 13,000 PNG needs ~164 KB even of one flat colour (deflate's 1,032:1 at most); a Huffman-coded
    JPEG at least one bit per 8x8 block. A file of a few KB whose header says so is cut or forged."""
    small = io.BytesIO()
    PIL.Image.new("RGB", (64, 64), (200, 30, 30)).save(small, fmt.upper())
    forged = tmp_path / f"forged.{'jpg' if fmt == 'jpeg' else fmt}"
    forged.write_bytes(_forged_size(small.getvalue(), fmt, 13000))
    assert read_image_header(None, forged.read_bytes(), fmt).size == (13000, 13000)
    with pytest.raises(MediaError, match=r"forged\.\w+: truncated or forged: its header declares 13000x13000"):
        mmtok.load(forged, max_pixels=200_000_000)
    whole = tmp_path / f"whole.{fmt}"
    PIL.Image.new("L", (4000, 3000), 0).save(whole, fmt.upper())  # one flat colour: the most a file can compress
    assert (mmtok.load(whole).width, mmtok.load(whole).height) == (4000, 3000)
    result = runner.invoke(app, ["price", "-m", "gpt-4o", "--max-pixels", "200000000", str(whole), str(forged)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "forged" in errors[0] and "truncated or forged" in errors[0], errors


def test_the_least_bytes_of_an_image_follow_its_format():
    from mmtok.headers import min_jpeg_bytes, min_png_bytes

    assert min_png_bytes(16000, 16000, 8, 0) == 16001 * 16000 // 1032  # grey, one filter byte a row
    assert min_png_bytes(100, 10, 1, 0) == (1 + 13) * 10 // 1032  # 1-bit rows pack 8 pixels a byte
    assert min_jpeg_bytes(4000, 3000, [(2, 2), (1, 1), (1, 1)]) == 250 * 188 // 8  # 4:2:0: chroma has fewest
    assert min_jpeg_bytes(17, 9, [(1, 1)]) == 3 * 2 // 8
