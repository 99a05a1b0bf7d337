"""The documents benchmark runs end to end on a small corpus and writes its figures (speed itself is measured by
running it, never asserted here)."""

from __future__ import annotations

import json

from mmtok.eval.bench import documents


def test_the_benchmark_writes_every_case_beside_its_anchor(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bench_documents.json"
    documents.main(["--files", "3", "--repeats", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["files"] == 3 and result["pages"] >= 3
    cases = result["cases"]
    assert cases["pdfium page count (anchor)"]["ratio_to_anchor"] == 1.0
    assert {"mmtok inspect (load + info)", "mmtok price (3 models)"} <= set(cases)
    assert out.with_suffix(".txt").read_text().startswith("Documents: 3 generated PDFs")


def test_the_corpus_is_written_once_and_reads_as_documents(tmp_path):
    first = documents.pdf_folder(tmp_path, 4, seed=7)
    stamps = [p.stat().st_mtime_ns for p in first]
    again = documents.pdf_folder(tmp_path, 4, seed=7)
    assert again == first and [p.stat().st_mtime_ns for p in again] == stamps
    assert documents.inspect_all(first) == documents.page_count_read(first)
