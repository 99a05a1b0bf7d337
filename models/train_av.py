"""``mmtok train av CONFIG``: train the shared audio/video embedder.

Data: the espeak-ng training sentences shipped in ``eval/data/speech/train`` (held-out sentences are never used) and
generated videos (``mmtok.models.data.synthetic_motion_clip``). Token features are computed at every rate in
``train_rates`` so one model serves any token rate. Loss: feature reconstruction from the codebook's codes and
from the continuous content (so tokens decode with or without the codebook) + commitment, for both modalities.
The trainer is its spec (:class:`mmtok.models.training.TrainSpec`); schedule, checkpoints, ``--resume`` and
``torchrun`` come from :class:`mmtok.models.training.Loop` (each rank draws its own token rows; the residual
codebook's EMA statistics are all-reduced by vector-quantize-pytorch).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mmtok.models.av import AVConfig, AVTokenizer, video_features_from_frames
from mmtok.models.data import speech_files, speech_folder, synthetic_motion_clip
from mmtok.models.training import Job, LoopConfig, LoopResult, Part, Setup, TrainSpec


@dataclass
class AVTrainConfig(LoopConfig):
    steps: int = 3000
    audio_tokens: int = 2048  # audio tokens per step
    video_tokens: int = 1024  # video tokens per step
    speech: str = ""  # folder with transcripts.jsonl; empty: the shipped training sentences
    speech_limit: int = 0  # use only the first N sentences (0: all)
    video_clips: int = 160  # generated clips per token rate
    video_seconds: float = 4.0
    log_every: int = 50
    out: str = "models/weights/av-tiny"
    name: str = "av-tiny"


def build_features(tok: AVTokenizer, train: AVTrainConfig) -> dict[float, dict[str, torch.Tensor]]:
    """Token features of all training data at every training rate (cached in the user cache by their settings)."""
    import hashlib

    from safetensors.torch import load_file, save_file

    import mmtok

    c = tok.config
    key = json.dumps(
        [
            c.sample_rate_hz,
            c.n_mels,
            c.frames_per_token,
            c.video_side,
            c.appearance_grid,
            c.train_rates,
            train.speech,
            train.speech_limit,
            train.video_clips,
            train.video_seconds,
            train.seed,
        ]
    )
    from mmtok.cache import cache_dir

    cache = cache_dir("av-features") / f"av-features-{hashlib.sha1(key.encode()).hexdigest()[:12]}.safetensors"
    if cache.is_file():
        flat = load_file(str(cache))
        return {rate: {m: flat[f"{rate}/{m}"] for m in ("audio", "video")} for rate in c.train_rates}

    rng = random.Random(train.seed)
    files = speech_files(speech_folder(train.speech))
    audio = [mmtok.load(p, kind="audio") for p in files[: train.speech_limit or None]]
    features: dict[float, dict[str, torch.Tensor]] = {}
    for rate in tok.config.train_rates:
        a = torch.cat([tok.audio_token_features(clip, rate) for clip in audio])
        v = []
        for _ in range(train.video_clips):
            frames, _ = synthetic_motion_clip(rng, train.video_seconds, rate, tok.config.video_side)
            v.append(video_features_from_frames(frames, None, tok.config)[0])
        features[rate] = {"audio": a, "video": torch.cat(v)}
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial")
    save_file({f"{rate}/{m}": t.contiguous() for rate, f in features.items() for m, t in f.items()}, str(partial))
    os.replace(partial, cache)
    return features


@dataclass
class AVSteps:
    """One training step, at one of the training rates in turn: audio and video feature rows through the shared
    codebook; each decoder reconstructs its modality's standardised features from the codes and from the content
    before quantisation."""

    tok: AVTokenizer
    train: AVTrainConfig
    features: dict[float, dict[str, torch.Tensor]]
    generator: torch.Generator
    device: torch.device

    def __call__(self, index: int) -> dict[str, float | torch.Tensor]:
        rates = list(self.features)
        rate = rates[index % len(rates)]
        contents, targets = [], []
        for modality, count in (("audio", self.train.audio_tokens), ("video", self.train.video_tokens)):
            pool = self.features[rate][modality]
            rows = pool[torch.randint(len(pool), (count,), generator=self.generator)].to(self.device)
            contents.append(self.tok.content(modality, rows))
            targets.append(self.tok.normalise(modality, rows))
        codes, _, commit = self.tok.quantize(torch.cat(contents))
        split = len(contents[0])
        total, losses = commit, {}
        for i, modality in enumerate(("audio", "video")):
            part = slice(0, split) if i == 0 else slice(split, None)
            from_codes = F.mse_loss(self.tok.decoders[modality](codes[part]), targets[i])
            from_content = F.mse_loss(self.tok.decoders[modality](contents[i]), targets[i])
            total = total + from_codes + from_content
            losses[f"{modality}_codes"] = from_codes.item()
            losses[f"{modality}_cont"] = from_content.item()
        total.backward()
        return {"loss": total.detach(), **losses}


def set_standardisation(tok: AVTokenizer, features: dict[float, dict[str, torch.Tensor]]) -> None:
    """Each modality's mean and standard deviation over every rate's features, into the tokenizer's buffers."""
    for modality in ("audio", "video"):
        everything = torch.cat([f[modality] for f in features.values()])
        getattr(tok, f"{modality}_mean").copy_(everything.mean(0))
        getattr(tok, f"{modality}_std").copy_(everything.std(0).clamp(min=1e-3))


def av_job(run: Setup) -> Job:
    """The tokenizer standardised on the training features (rank 0 fills their cache), its AdamW and the step;
    the record keeps the last step's reconstruction losses."""
    av_cfg, train, ctx, dev = run.model, run.train, run.ctx, run.device
    tok = AVTokenizer(av_cfg, name=train.name)
    with ctx.main_first():  # rank 0 fills the feature cache, the others read it
        features = build_features(tok, train)
    set_standardisation(tok, features)
    tok.to(dev).train()
    optimizer = torch.optim.AdamW(tok.parameters(), lr=train.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(train.seed + ctx.rank)
    step = AVSteps(tok, train, features, generator, dev)
    return Job(Part(tok, optimizer), step, record=final_losses, rngs={"data": generator})


def final_losses(result: LoopResult) -> dict[str, dict[str, float]]:
    return {"final": {k: v for k, v in result.last.items() if k.endswith(("_codes", "_cont"))}}


train_av = TrainSpec("av", AVConfig, AVTrainConfig, av_job)
