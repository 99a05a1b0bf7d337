"""Audio and video files cut off at the end, as an interrupted upload or copy leaves them, written by real encoders
(libx264 + AAC in Matroska, VP9 + Opus in WebM, LAME MP3, libFLAC). Their headers keep the whole file's duration and
no index past the end shows the cut, so load seeks to where the data must still go on (``must_reach``) and reads a
few packets: a cut Matroska, WebM or FLAC file is refused there, by ``price``, ``inspect`` and ``tokenize`` alike,
instead of being priced at its header's duration. MP3 and ADTS durations are FFmpeg's estimates (a frame count or
the bitrate): when the data stops short of one, the packets' span is the duration. Formats whose reader measures a
cut file itself (WAV, Ogg, AVI) load at the shorter length. Valid files the probe must not refuse: streams that
start late, a sound track shorter than its video, a second sound track longer than the first, a quiet start."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

import mmtok
from mmtok.cli.main import app
from mmtok.errors import MediaError
from mmtok.eval.tools.av_files import VIDEO_OPTIONS, av_file, encode_sound, encoder_samples
from tests.makers import write_video

SECONDS = 12


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("whole")
    files = {
        "mkv": av_file(folder / "a.mkv", "matroska", "libx264", "aac", SECONDS),
        "webm": av_file(folder / "a.webm", "webm", "libvpx-vp9", "libopus", SECONDS),
        "mp3": av_file(folder / "a.mp3", "mp3", None, "libmp3lame", SECONDS),
    }
    wave = 0.2 * np.sin(2 * np.pi * 440 * np.arange(SECONDS * 16000) / 16000)
    for name in ("flac", "wav", "ogg"):
        sf.write(folder / f"a.{name}", wave.astype(np.float32), 16000, **({"subtype": "OPUS"} if name == "ogg" else {}))
        files[name] = folder / f"a.{name}"
    return files


def _cut(path: Path, share: float, folder: Path) -> Path:
    out = folder / f"cut{round(share * 100)}-{path.name}"
    data = path.read_bytes()
    out.write_bytes(data[: int(len(data) * share)])
    return out


def test_whole_files_load_at_their_duration(whole):
    for path in whole.values():
        assert mmtok.load(path).duration_s == pytest.approx(SECONDS, abs=0.1), path.name


@pytest.mark.parametrize("name", ["mkv", "webm"])
@pytest.mark.parametrize("share", [0.33, 0.8])
def test_a_cut_container_is_refused_at_load_with_where_its_data_ends(whole, tmp_path, name, share):
    cut = _cut(whole[name], share, tmp_path)
    with pytest.raises(MediaError) as caught:
        mmtok.load(cut)
    match = re.search(
        rf"{re.escape(cut.name)}: video stream is cut short: it ends at (\d+\.\d+) s of the 12\.\d\d s its header "
        "declares$",
        str(caught.value),
    )
    assert match, str(caught.value)
    assert float(match[1]) == pytest.approx(share * SECONDS, abs=1.0)  # bytes and seconds go nearly together here


@pytest.mark.parametrize("share", [0.33, 0.8])
def test_a_cut_mp3_loads_at_its_packets_span_not_its_frame_count(whole, tmp_path, share):
    assert mmtok.load(_cut(whole["mp3"], share, tmp_path)).duration_s == pytest.approx(share * SECONDS, abs=0.3)


def test_a_matroska_file_cut_inside_its_first_cluster_is_refused(tmp_path):
    """No whole packet is left, and FFmpeg refuses to seek (EPERM): still a cut file."""
    data = write_video(tmp_path / "v.mkv", [i / 24 for i in range(4 * 24)]).read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: data.index(b"\x1f\x43\xb6\x75") + 24])  # the first Cluster's ID, and a few bytes
    with pytest.raises(MediaError, match=r"cut\.mkv: video stream is cut short: it ends at 0\.00 s of the 3\.9"):
        mmtok.load(cut)


@pytest.mark.parametrize("share", [0.33, 0.8])
def test_a_cut_flac_is_refused_at_load(whole, tmp_path, share):
    cut = _cut(whole["flac"], share, tmp_path)
    with pytest.raises(MediaError, match=r"audio data stops before 10\.80 s of the 12\.00 s its header declares"):
        mmtok.load(cut)


@pytest.mark.parametrize("name", ["wav", "ogg"])
def test_a_cut_file_whose_reader_measures_it_loads_at_the_shorter_length(whole, tmp_path, name):
    cut = _cut(whole[name], 0.5, tmp_path)
    assert 3.0 < mmtok.load(cut).duration_s < 7.0


def test_a_sound_track_shorter_than_its_video_is_not_taken_for_a_cut_file(tmp_path):
    path = write_video(tmp_path / "v.mkv", [i / 24 for i in range(6 * 24)], audio_rate=16000, audio_seconds=2.0)
    video = mmtok.load(path)  # Matroska states one duration for the file: the sound track inherits the 6 s
    assert video.duration_s == pytest.approx(6.0, abs=0.1)


def _timed(path: Path, fmt: str, tracks: list[tuple[str, float, float]]) -> Path:
    """A file with a stream per (codec, first time s, seconds): video for the codecs of ``VIDEO_OPTIONS``, else
    mono sound."""
    with av.open(str(path), "w", format=fmt) as container:
        streams = []
        for codec, _, _ in tracks:
            if codec in VIDEO_OPTIONS:
                stream = container.add_stream(codec, rate=24, options=VIDEO_OPTIONS[codec])
                stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
            else:
                stream = container.add_stream(codec, rate=48000 if codec == "libopus" else 44100, layout="mono")
            streams.append(stream)
        for stream, (codec, start, seconds) in zip(streams, tracks, strict=True):
            if codec in VIDEO_OPTIONS:
                for i in range(round(seconds * 24)):
                    frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 9 * i % 256, np.uint8), format="rgb24")
                    frame.pts, frame.time_base = i + round(start * 24), Fraction(1, 24)
                    container.mux(stream.encode(frame))
                container.mux(stream.encode(None))
                continue
            rate, step = stream.codec_context.sample_rate, stream.codec_context.frame_size or 1024
            sample_format = stream.codec_context.format.name
            noise = np.random.default_rng(0).uniform(-0.8, 0.8, round(seconds * rate) + step)
            for at in range(0, round(seconds * rate), step):
                wave = noise[at : at + step] * (at >= 2 * rate if fmt == "adts" else 1)  # ADTS: 2 s of silence first
                frame = av.AudioFrame.from_ndarray(
                    encoder_samples(wave, sample_format)[None], format=sample_format, layout="mono"
                )
                frame.sample_rate, frame.time_base = rate, Fraction(1, rate)
                frame.pts = at + round(start * rate)
                container.mux(stream.encode(frame))
            container.mux(stream.encode(None))
    return path


@pytest.mark.parametrize(
    ("name", "fmt", "tracks", "seconds"),
    [
        ("late.mkv", "matroska", [("libx264", 2.0, 3.0), ("aac", 2.0, 3.0)], 5.0),  # both start at 2 s
        ("late-sound.mkv", "matroska", [("libx264", 0.0, 4.0), ("aac", 1.0, 4.0)], 5.0),
        ("late.webm", "webm", [("libvpx-vp9", 2.0, 3.0), ("libopus", 2.0, 3.0)], 5.0),
        ("second-longer.mkv", "matroska", [("libx264", 0.0, 2.0), ("aac", 0.0, 2.0), ("aac", 0.0, 6.0)], 6.0),
        ("quiet-start.aac", "adts", [("aac", 0.0, 5.0)], 5.0),  # FFmpeg's bitrate estimate: ~75 s
    ],
)
def test_valid_files_the_probe_could_mistake_for_cut_ones_load(tmp_path, name, fmt, tracks, seconds):
    media = mmtok.load(_timed(tmp_path / name, fmt, tracks))
    assert media.duration_s == pytest.approx(seconds, abs=0.15), name  # Matroska's duration counts from 0 s


def test_price_and_tokenize_report_each_cut_file_in_one_line_and_go_on(whole, tmp_path):
    cuts = [_cut(whole[name], 0.33, tmp_path) for name in ("mkv", "webm", "flac")]
    runner = CliRunner()
    priced = runner.invoke(app, ["price", str(whole["mkv"]), *map(str, cuts), "--model", "gemini-3-flash-preview"])
    assert priced.exit_code == 1, priced.output
    errors = [line for line in priced.stderr.splitlines() if line.startswith("error:")]
    assert [Path(e.split(":")[1].strip()).name for e in errors] == [c.name for c in cuts], priced.stderr
    assert "Traceback" not in priced.output and whole["mkv"].name in priced.stdout
    tokenized = runner.invoke(app, ["tokenize", str(whole["mkv"]), str(cuts[0]), "-o", str(tmp_path / "t")])
    assert tokenized.exit_code == 1, tokenized.output
    written = [p.name for p in (tmp_path / "t").rglob("*.safetensors")]
    assert len(written) == 1 and written[0].startswith("a."), written  # the whole file's tokens, not the cut one's
    assert "cut short" in tokenized.stderr


def test_an_adts_file_is_priced_at_its_packets_not_ffmpegs_bitrate_estimate(tmp_path):
    from mmtok.budgets.pricing import price

    path = _timed(tmp_path / "speech.aac", "adts", [("aac", 0.0, 5.0)])  # 2 s of silence, then 3 s of sound
    with av.open(str(path)) as container:
        assert container.duration / 1e6 > 20  # FFmpeg reads the quiet start's low bitrate into the whole file
    quote = price(path, model="gemini-3-flash-preview")
    assert quote.tokens("audio") == pytest.approx(5.04 * 25, abs=2)  # Gemini 3: 25 tokens a second of sound


def test_flac_in_ogg_muxed_by_ffmpeg_loads_and_decodes_through_ffmpeg(tmp_path):
    """libsndfile cannot open FFmpeg's Ogg FLAC ("unknown error in flac decoder"); FFmpeg reads it."""
    path = _timed(tmp_path / "a.ogg", "ogg", [("flac", 0.0, 3.0)])
    audio = mmtok.load(path)
    assert audio.codec == "flac" and audio.duration_s == pytest.approx(3.0, abs=0.1)
    assert audio.waveform().shape[-1] == pytest.approx(3 * 44100, abs=4096)


def test_a_damaged_file_libsndfile_cannot_open_keeps_its_message(tmp_path):
    path = tmp_path / "bad.flac"
    path.write_bytes(b"fLaC" + bytes(range(256)) * 8)
    with pytest.raises(MediaError, match=r"bad\.flac: corrupt flac audio: "):
        mmtok.load(path)


# --------------------------------------------------------------------------------- a review's cases (each a bug once)
def test_a_matroska_duration_no_seek_can_name_is_refused_in_one_line(tmp_path):
    """TimecodeScale 1 ns and a Duration of 1.2e19 ticks: the seek target overflows int64 (OverflowError)."""
    import struct

    data = bytearray(write_video(tmp_path / "v.mkv", [i / 24 for i in range(48)]).read_bytes())
    scale = data.index(b"\x2a\xd7\xb1")  # TimecodeScale
    width = data[scale + 3] & 0x7F
    data[scale + 4 : scale + 4 + width] = (1).to_bytes(width, "big")
    duration = data.index(b"\x44\x89")  # Duration: a float of 4 or 8 bytes
    packed = struct.pack(">d", 1.2e19) if data[duration + 2] == 0x88 else struct.pack(">f", 1.2e19)
    data[duration + 3 : duration + 3 + len(packed)] = packed
    forged = tmp_path / "forged.mkv"
    forged.write_bytes(bytes(data))
    with pytest.raises(MediaError, match=r"forged\.mkv: video stream is cut short: it ends at [\d.]+ s of the"):
        mmtok.load(forged)


def test_subtitles_longer_than_the_sound_are_not_a_cut_and_do_not_lengthen_the_sound(tmp_path):
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:01,000 --> 00:00:02,000\nhello\n\n2\n00:00:28,000 --> 00:00:30,000\nbye\n")
    sound = _timed(tmp_path / "a.mka", "matroska", [("aac", 0.0, 6.0)])
    with av.open(str(sound)) as a, av.open(str(srt)) as s, av.open(str(tmp_path / "sub.mkv"), "w", "matroska") as out:
        audio, text = out.add_stream_from_template(a.streams.audio[0]), out.add_stream_from_template(s.streams[0])
        for source, target in ((a, audio), (s, text)):
            for packet in source.demux(source.streams[0]):
                if packet.dts is not None:
                    packet.stream = target
                    out.mux(packet)
    with av.open(str(tmp_path / "sub.mkv")) as container:
        assert container.duration / 1e6 == pytest.approx(30.0, abs=0.1)  # the file's duration is the subtitles'
    assert mmtok.load(tmp_path / "sub.mkv").duration_s == pytest.approx(6.0, abs=0.1)  # the sound's own span


def test_an_mp3_that_states_no_frame_count_is_measured_by_its_packets(tmp_path):
    """VBR without a Xing frame, 2 s of noise then 18 s of silence: FFmpeg's bitrate estimate, taken from the loud
    start, is far too short."""
    path = tmp_path / "vbr.mp3"
    with av.open(str(path), "w", format="mp3", options={"write_xing": "0"}) as container:
        stream = container.add_stream("libmp3lame", rate=44100, layout="mono")
        stream.codec_context.flags |= av.codec.context.Flags.qscale
        stream.codec_context.global_quality = 4 * 118  # FF_QP2LAMBDA x VBR quality 4
        fmt, step = stream.codec_context.format.name, stream.codec_context.frame_size or 1152
        noise = np.random.default_rng(0).uniform(-0.9, 0.9, 20 * 44100) * (np.arange(20 * 44100) < 2 * 44100)
        for at in range(0, len(noise) - step, step):
            frame = av.AudioFrame.from_ndarray(encoder_samples(noise[at : at + step], fmt)[None], fmt, "mono")
            frame.sample_rate, frame.pts, frame.time_base = 44100, at, Fraction(1, 44100)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(str(path)) as container:
        assert container.duration / 1e6 < 19  # from the bitrate of the first frames
    assert mmtok.load(path).duration_s == pytest.approx(20.0, abs=0.2)


def test_a_flac_of_unknown_length_is_measured_by_its_packets(tmp_path):
    """STREAMINFO total_samples = 0 is legal (FLAC written to a pipe): libsndfile reports SF_COUNT_MAX frames."""
    path = tmp_path / "pipe.flac"
    sf.write(path, np.zeros(3 * 16000, np.float32) + 0.1, 16000)
    data = bytearray(path.read_bytes())
    packed = int.from_bytes(data[18:26], "big")  # rate (20 bits), channels, bits, total samples (36)
    data[18:26] = (packed >> 36 << 36).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    audio = mmtok.load(path)
    assert audio.duration_s == pytest.approx(3.0, abs=0.1) and audio.stream_index is not None  # FFmpeg decodes it


def test_an_adts_file_whose_loud_start_makes_ffmpeg_guess_short_is_measured(tmp_path):
    """2 s of noise, then 18 s of silence: FFmpeg's bitrate estimate is ~3 s."""
    path = tmp_path / "loud.aac"
    with av.open(str(path), "w", format="adts") as container:
        stream = container.add_stream("aac", rate=44100, layout="mono")
        noise = np.random.default_rng(0).uniform(-0.9, 0.9, 20 * 44100) * (np.arange(20 * 44100) < 2 * 44100)
        for at in range(0, len(noise) - 1024, 1024):
            frame = av.AudioFrame.from_ndarray(noise[None, at : at + 1024].astype(np.float32), "fltp", "mono")
            frame.sample_rate, frame.pts, frame.time_base = 44100, at, Fraction(1, 44100)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(str(path)) as container:
        assert container.duration / 1e6 < 10
    assert mmtok.load(path).duration_s == pytest.approx(20.0, abs=0.2)


def test_inspect_reports_a_cut_file_in_one_line_and_exits_1(whole, tmp_path):
    cut = _cut(whole["webm"], 0.33, tmp_path)
    result = CliRunner().invoke(app, ["inspect", str(whole["webm"]), str(cut)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and cut.name in errors[0] and "cut short" in errors[0], result.stderr
    assert "Traceback" not in result.output


def test_an_mp3s_frame_count_is_found_after_its_id3_tag(tmp_path):
    from mmtok.media.reach import states_frame_count

    counted = av_file(tmp_path / "xing.mp3", "mp3", None, "libmp3lame", 2)  # FFmpeg writes ID3v2, then Xing/Info
    assert counted.read_bytes()[:3] == b"ID3" and states_frame_count(counted)
    with av.open(str(tmp_path / "bare.mp3"), "w", format="mp3", options={"write_xing": "0"}) as container:
        encode_sound(container, container.add_stream("libmp3lame", rate=44100, layout="mono"), 2)
    assert not states_frame_count(tmp_path / "bare.mp3")
    assert states_frame_count(tmp_path / "missing.mp3")  # a file gone since FFmpeg opened it keeps FFmpeg's duration


def _bare_mp3(path: Path, seconds: float, rate: int = 44100, layout: str = "mono", bit_rate: int = 128_000) -> Path:
    with av.open(str(path), "w", format="mp3", options={"write_xing": "0"}) as container:
        stream = container.add_stream("libmp3lame", rate=rate, layout=layout)
        stream.bit_rate = bit_rate
        encode_sound(container, stream, seconds)
    return path


def _packets_span(path: Path) -> float:
    from mmtok.media.reach import measured_spans

    with av.open(str(path)) as container:
        return measured_spans(container)[container.streams.audio[0].index]


@pytest.mark.parametrize(
    ("rate", "layout", "bit_rate"),
    [(44100, "mono", 128_000), (48000, "stereo", 192_000), (22050, "mono", 64_000), (8000, "mono", 16_000)],
)
def test_an_mp3s_frame_walk_equals_its_packets_span(tmp_path, rate, layout, bit_rate):
    """MPEG-1, 2 and 2.5 Layer III; whole, cut mid-frame, and with ID3v1 or APEv2 tags after the audio."""
    from mmtok.media.reach import mp3_span

    whole = _bare_mp3(tmp_path / "a.mp3", 7, rate, layout, bit_rate)
    data = whole.read_bytes()
    variants = {
        "whole": data,
        "cut": data[: len(data) // 3 + 17],
        "id3v1": data + b"TAG" + bytes(125),
        "ape": data + _ape_tag(),
        "ape+id3v1": data + _ape_tag() + b"TAG" + bytes(125),
    }
    for name, content in variants.items():
        path = tmp_path / f"{name}.mp3"
        path.write_bytes(content)
        assert mp3_span(path) == pytest.approx(_packets_span(path), abs=1e-9), name
    lyrics = tmp_path / "lyrics3.mp3"  # FFmpeg reads a Lyrics3 block as frames: the walk leaves it to the packets
    lyrics.write_bytes(data + b"LYRICSBEGIN" + b"LYR00005hello" + b"000024" + b"LYRICS200")
    assert mp3_span(lyrics) is None and mmtok.load(lyrics).duration_s == pytest.approx(_packets_span(lyrics))


def test_an_mp3_the_walk_cannot_vouch_for_is_measured_by_its_packets(tmp_path, monkeypatch):
    from mmtok.media import reach

    data = _bare_mp3(tmp_path / "a.mp3", 7).read_bytes()
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(data[:5000] + b"not a frame" + data[5000:])  # FFmpeg resyncs; the walk does not guess
    assert reach.mp3_span(junk) is None
    assert mmtok.load(junk).duration_s == pytest.approx(_packets_span(junk), abs=1e-6)
    assert reach.mp3_span(tmp_path / "missing.mp3") is None
    (tmp_path / "empty.mp3").write_bytes(b"")
    assert reach.mp3_span(tmp_path / "empty.mp3") is None

    def no_pass(container):
        raise AssertionError("a clean Xing-less MP3 needs no pass over its packets")

    monkeypatch.setattr(reach, "measured_spans", no_pass)
    assert mmtok.load(tmp_path / "a.mp3").duration_s == pytest.approx(7.0, abs=0.05)  # the walk alone


def _ape_tag() -> bytes:
    """An APEv2 tag with a header and one item: its footer's size counts the items and the footer."""
    item = (5).to_bytes(4, "little") + bytes(4) + b"Title\0hello"
    size = (len(item) + 32).to_bytes(4, "little")

    def block(flags: int) -> bytes:
        return (
            b"APETAGEX"
            + (2000).to_bytes(4, "little")
            + size
            + (1).to_bytes(4, "little")
            + flags.to_bytes(4, "little")
            + bytes(8)
        )

    return block(0xA0000000) + item + block(0x80000000)


def test_audio_after_a_tag_in_the_middle_is_not_cut_off(tmp_path):
    """Two files joined with cat (each ending in an ID3v1 tag), and a crafted one: a tag ends the audio only where it
    ends the file, so the walk gives way to the packets there, as FFmpeg reads on."""
    from mmtok.media.reach import mp3_span

    one = _bare_mp3(tmp_path / "one.mp3", 3).read_bytes() + b"TAG" + bytes(125)
    joined = tmp_path / "joined.mp3"
    joined.write_bytes(one + one)
    crafted = tmp_path / "crafted.mp3"
    crafted.write_bytes(one[:2000] + b"TAG" + bytes(125) + _bare_mp3(tmp_path / "long.mp3", 20).read_bytes())
    for path in (joined, crafted):
        assert mp3_span(path) is None
        assert mmtok.load(path).duration_s == pytest.approx(_packets_span(path), abs=1e-6)
    assert mmtok.load(joined).duration_s == pytest.approx(2 * mmtok.load(tmp_path / "one.mp3").duration_s, abs=0.05)


def test_a_xing_frame_the_header_check_missed_is_not_counted_as_audio(tmp_path):
    """More than 4 KiB of zeros between the ID3v2 tag and the Xing frame: ``states_frame_count`` does not see it,
    and the walk does not count that frame."""
    from mmtok.media.reach import _id3v2_size, mp3_span

    data = av_file(tmp_path / "x.mp3", "mp3", None, "libmp3lame", 3).read_bytes()  # ID3v2, then an Info frame
    tag = _id3v2_size(data)
    padded = tmp_path / "padded.mp3"
    size = tag - 10 + 6000  # the tag grows by 6,000 bytes of zero padding (its syncsafe size field)
    syncsafe = bytes((size >> shift) & 0x7F for shift in (21, 14, 7, 0))
    padded.write_bytes(data[:6] + syncsafe + data[10:tag] + bytes(6000) + data[tag:])
    assert mp3_span(padded) == pytest.approx(_packets_span(padded), abs=1e-9)


def _many_channels(path: Path, channels: int, rate: int = 16000) -> Path:
    samples = np.random.default_rng(0).normal(0, 3000, (rate, channels)).astype(np.int16)
    with av.open(str(path), "w", format="matroska") as container:
        stream = container.add_stream("pcm_s16le", rate=rate, layout=f"{channels}c")
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout=f"{channels}c")
        frame.sample_rate, frame.pts, frame.time_base = rate, 0, Fraction(1, rate)
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def test_ten_channels_through_ffmpeg_decode_in_a_process_that_survives(tmp_path):
    """PyAV's planar to_ndarray read past a frame's eight data pointers: a 10-channel stream killed the process
    (SIGSEGV). Decoded packed now, in a child process so a crash would fail this test, not the run."""
    import subprocess
    import sys

    path = _many_channels(tmp_path / "ten.mka", 10)
    script = "import sys, mmtok; w = mmtok.load(sys.argv[1]).waveform(); print(*w.shape)"
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.split() == ["10", "16000"]


def test_packed_decoding_gives_the_samples_planar_decoding_gave(tmp_path):
    path = _many_channels(tmp_path / "two.mka", 2)
    mine = mmtok.load(path).waveform().numpy()
    with av.open(str(path)) as container:
        resampler = av.AudioResampler(format="fltp", layout="2c", rate=16000)
        planar = np.concatenate([f.to_ndarray() for fr in container.decode(audio=0) for f in resampler.resample(fr)], 1)
    assert np.array_equal(mine, planar)
