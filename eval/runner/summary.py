"""The summary of a run folder: the current row of each of the suite's items, and the suite-level metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mmtok.errors import EvalError
from mmtok.eval.runner.folder import _stored_fingerprint
from mmtok.eval.runner.items import item_error
from mmtok.eval.runner.results import FINGERPRINT, RESULTS, SUITE, _features_path, read_results
from mmtok.eval.suite import Suite, expected_rows
from mmtok.files import read_json


def current_rows(out_dir: Path) -> tuple[Suite, list[dict[str, Any]], int]:
    """The run's suite, the current row of each of its items that has one (in suite order: the last row of the id,
    computed from the item's current content and settings), and the number of items in the suite."""
    out_dir = Path(out_dir)
    if (out_dir / FINGERPRINT).is_file():
        fp = _stored_fingerprint(out_dir)
        expected = expected_rows(fp)
        rows = read_results(out_dir, ids=expected)  # the suite's items only: other ids' rows are not kept
        present = [rows[i] for i, h in expected.items() if i in rows and rows[i].get("hash") == h]
        return Suite.from_dict(fp["suite"]), present, len(expected)
    rows = read_results(out_dir)
    # a folder written before fingerprints: its rows are all there is to count
    stored = read_json(out_dir / SUITE, "run suite", EvalError)
    if not isinstance(stored, dict):
        raise EvalError(f"{out_dir / SUITE}: not a suite")
    return Suite.from_dict(stored), list(rows.values()), len(rows)


def summarize(out_dir: Path) -> dict[str, Any]:
    """Suite-level metrics over the current result of each of the suite's items, in suite order.

    ``items`` is the number of items in the suite; ``ok`` + ``failed`` + ``missing`` (not run yet, or run with other
    settings or content) add up to it. Rows of items no longer in the suite are left out.
    """
    suite, present, total = current_rows(out_dir)
    ok = [r for r in present if not r.get("error")]
    failed = [r for r in present if r.get("error")]
    summary: dict[str, Any] = {
        "suite": suite.name,
        "kind": suite.kind,
        "items": total,
        "ok": len(ok),
        "failed": len(failed),
        "missing": total - len(present),
        "metrics": {},
        "protocol": {},
        "errors": [{"id": r["id"], "error": r["error"]} for r in failed][:20],
    }
    if ok:
        summary["mean_tokens"] = sum(r.get("tokens", 0) for r in ok) / len(ok)
    suite_metrics = SUITE_METRICS.get(suite.kind)
    if ok and suite_metrics is not None:
        suite_metrics(suite, ok, out_dir, summary["metrics"], summary["protocol"])
    return summary


def _image_metrics(suite: Suite, ok: list[dict[str, Any]], out_dir: Path, m: dict, protocol: dict) -> None:
    for key in ("psnr_db", "ssim"):
        values = [r["metrics"][key] for r in ok if key in r["metrics"]]
        if values:
            m[key] = sum(values) / len(values)
    protocol["psnr_ssim"] = "torchmetrics on [-1, 1] images, data range 2; SSIM Gaussian 11 / 1.5"
    if "fd" not in suite.metrics:
        return
    from mmtok.eval.extractors import get_extractor
    from mmtok.eval.metrics import feature_frechet

    feats = [_stored_features(out_dir, r["id"]) for r in ok]
    original = torch.stack([f["original"] for f in feats])
    recon = torch.stack([f["reconstruction"] for f in feats])
    extractor = get_extractor(suite.fd_extractor)
    m[extractor.metric] = feature_frechet(original, recon)
    protocol[extractor.metric] = f"{extractor.protocol}; originals vs reconstructions, N = {len(feats)}"


def _stored_features(out_dir: Path, item_id: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = _features_path(out_dir, item_id)
    try:
        return load_file(str(path))
    except Exception as e:  # a features file deleted or damaged since: its item must be redone
        raise EvalError(
            f"{path}: features of item {item_id!r} cannot be read ({item_error(e)}); delete its row from "
            f"{RESULTS} and resume"
        ) from None


def _speech_metrics(suite: Suite, ok: list[dict[str, Any]], out_dir: Path, m: dict, protocol: dict) -> None:
    from mmtok.eval.asr import NORMALISER, get_asr

    words = sum(r["metrics"]["words"] for r in ok)
    chars = sum(r["metrics"]["chars"] for r in ok)
    m["wer"] = sum(r["metrics"]["word_errors"] for r in ok) / words
    m["cer"] = sum(r["metrics"]["char_errors"] for r in ok) / chars
    protocol["wer"] = f"corpus WER over {len(ok)} items, ASR {get_asr(suite.asr).name}, {NORMALISER}"


def _qa_metrics(suite: Suite, ok: list[dict[str, Any]], out_dir: Path, m: dict, protocol: dict) -> None:
    if "accuracy" in suite.metrics:
        m["accuracy"] = sum(r["metrics"]["accuracy"] for r in ok) / len(ok)
        protocol["accuracy"] = "exact match of the predicted digit"
    if "judge" in suite.metrics:
        scores = [r["metrics"]["judge"] for r in ok if r["metrics"].get("judge") is not None]
        statuses = [r.get("judge", {}).get("status") for r in ok]
        m["judge"] = sum(scores) / len(scores) if scores else None
        m["judge_unparseable"] = statuses.count("unparseable")
        m["judge_skipped"] = statuses.count("skipped")
        if "accuracy" in suite.metrics:  # whether the judge tells right answers from wrong ones
            for name, right in (("judge_when_right", 1), ("judge_when_wrong", 0)):
                part = [r["metrics"]["judge"] for r in ok if r["metrics"].get("judge") is not None
                        and r["metrics"]["accuracy"] == right]  # fmt: skip
                m[name] = sum(part) / len(part) if part else None
        judge_name = next((r["judge"]["judge"] for r in ok if r.get("judge", {}).get("judge")), str(suite.judge))
        protocol["judge"] = f"{judge_name}, rubric in mmtok.eval.judge.RUBRIC, mean 1-5 over scored items"


SUITE_METRICS = {"images": _image_metrics, "speech": _speech_metrics, "qa": _qa_metrics}  # by Suite.kind
