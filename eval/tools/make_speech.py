"""Regenerate the speech sets in ``eval/data/speech/`` (``python -m mmtok.eval.tools.make_speech``; needs espeak-ng).

- ``heldout/``: 40 Harvard sentences (IEEE 1969 phonetically balanced lists 1-4), espeak-ng en-us at 150 wpm,
  16 kHz FLAC (lossless): the WER evaluation set. Never used in training.
- ``train/``: 240 sentences built from a fixed vocabulary and templates (seeded), spoken by twelve espeak-ng voice
  variants at 130-175 wpm, 16 kHz Ogg Opus (small): training data for the audio tokenizer.

Each folder has ``transcripts.jsonl`` lines ``{"path": ..., "text": ...}``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

HARVARD = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.",
    "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.",
    "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.",
    "A pot of tea helps to pass the evening.",
    "Smoky fires lack flame and heat.",
    "The soft cushion broke the man's fall.",
    "The salt breeze came across from the sea.",
    "The girl at the booth sold fifty bonds.",
    "The small pup gnawed a hole in the sock.",
    "The fish twisted and turned on the bent hook.",
    "Press the pants and sew a button on the vest.",
    "The swan dive was far short of perfect.",
    "The beauty of the view stunned the young boy.",
    "Two blue fish swam in the tank.",
    "Her purse was full of useless trash.",
    "The colt reared and threw the tall rider.",
    "It snowed, rained, and hailed the same morning.",
    "Read verse out loud for pleasure.",
    "Hoist the load to your left shoulder.",
    "Take the winding path to reach the lake.",
    "Note closely the size of the gas tank.",
    "Wipe the grease off his dirty face.",
    "Mend the coat before you go out.",
    "The wrist was badly strained and hung limp.",
    "The stray cat gave birth to kittens.",
    "The young girl gave no clear response.",
    "The meal was cooked before the bell rang.",
    "What joy there is in living.",
]
ADJECTIVES = [
    "old",
    "red",
    "quiet",
    "bright",
    "heavy",
    "small",
    "green",
    "cold",
    "busy",
    "tired",
    "gentle",
    "loud",
    "dark",
    "clever",
    "empty",
    "yellow",
    "narrow",
    "happy",
    "wooden",
    "silver",
]
NOUNS = [
    "farmer",
    "window",
    "river",
    "teacher",
    "garden",
    "doctor",
    "basket",
    "engine",
    "letter",
    "market",
    "bridge",
    "kitten",
    "pencil",
    "village",
    "captain",
    "blanket",
    "station",
    "orange",
    "ladder",
    "morning",
]
VERBS = [
    "painted",
    "carried",
    "found",
    "opened",
    "watched",
    "cleaned",
    "followed",
    "dropped",
    "built",
    "sold",
    "pushed",
    "counted",
    "visited",
    "closed",
    "lifted",
    "washed",
    "borrowed",
    "signed",
    "packed",
    "moved",
]
PLACES = [
    "near the bridge",
    "before noon",
    "in the kitchen",
    "after the rain",
    "by the old mill",
    "at the station",
    "under the table",
    "on the hill",
    "across the street",
    "during the night",
]
TEMPLATES = [
    "The {a} {n} {v} the {a2} {n2} {p}.",
    "A {a} {n} {v} a {n2} {p}.",
    "{p_cap}, the {n} {v} the {a2} {n2}.",
    "Did the {a} {n} really say the {n2} was {a2}?",
    "We {v} the {n} and the {n2} {p}.",
]
VOICES = [
    "en-us",
    "en-us+m1",
    "en-us+m2",
    "en-us+m3",
    "en-us+m4",
    "en-us+m5",
    "en-us+m7",
    "en-us+f1",
    "en-us+f2",
    "en-us+f3",
    "en-us+f4",
    "en-gb",
]
SAMPLE_RATE_HZ = 16_000


def training_sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        place = rng.choice(PLACES)
        text = rng.choice(TEMPLATES).format(
            a=rng.choice(ADJECTIVES),
            n=rng.choice(NOUNS),
            v=rng.choice(VERBS),
            a2=rng.choice(ADJECTIVES),
            n2=rng.choice(NOUNS),
            p=place,
            p_cap=place[0].upper() + place[1:],
        )
        if text not in out:
            out.append(text)
    return out


def speak(text: str, voice: str, wpm: int) -> np.ndarray:
    import torchaudio.functional as AF

    if shutil.which("espeak-ng") is None:
        raise SystemExit("espeak-ng is not installed (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), text], check=True)
        wave, rate = sf.read(raw, dtype="float32")
    wave = AF.resample(torch.from_numpy(wave), rate, SAMPLE_RATE_HZ).numpy()
    return 0.9 * wave / max(1e-6, float(np.abs(wave).max()))


def write_set(folder: Path, items: list[tuple[str, str, int]], fmt: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (text, voice, wpm) in enumerate(items):
        wave = speak(text, voice, wpm)
        if fmt == "flac":
            name = f"{i:03d}.flac"
            sf.write(folder / name, wave, SAMPLE_RATE_HZ, format="FLAC")
        else:
            name = f"{i:03d}.ogg"
            sf.write(folder / name, wave, SAMPLE_RATE_HZ, format="OGG", subtype="OPUS")
        lines.append(json.dumps({"path": name, "text": text, "voice": voice, "wpm": wpm}))
    (folder / "transcripts.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "data" / "speech")
    parser.add_argument("--train", type=int, default=240)
    args = parser.parse_args()
    rng = random.Random(11)
    write_set(args.out / "heldout", [(t, "en-us", 150) for t in HARVARD], "flac")
    write_set(
        args.out / "train",
        [(t, rng.choice(VOICES), rng.randint(130, 175)) for t in training_sentences(args.train)],
        "opus",
    )
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {len(HARVARD)} held-out and {args.train} training sentences to {args.out} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
