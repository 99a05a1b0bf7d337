"""Shared fixtures, and the tests of the core install.

The tests in :data:`CORE_TESTS` test what ``pip install mmtok`` gives without extras: they are marked ``core`` here.
``make test`` runs them in ``.venv-core`` (mmtok with no extras, plus the test tools: no torch), where a core
command that imports torch or any extra fails, then the rest in ``.venv``. On such an install only those files are
collected (the others import torch and the extras at their top).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
from pathlib import Path

import pytest

from mmtok.samples import samples_dir

CORE_ONLY = importlib.util.find_spec("torch") is None  # this interpreter has the core alone

# The test files whose tests run on the core install (pricing, request bodies, inspect, the proxy, ledger, calibrate,
# mcp, hook, shrink with the pixel bars), but for NEEDS_AN_EXTRA. A test added to one of these files is a core test:
# it must need no extra (or be named below).
CORE_TESTS = frozenset(
    {
        "test_batch_price.py",
        "test_batch_shrink.py",
        "test_calibrate.py",
        "test_calibrate_checks.py",
        "test_calibrate_measure.py",
        "test_cli_price.py",
        "test_cli_price_requests.py",
        "test_cli_shrink.py",
        "test_cli_start.py",
        "test_cli_stdin.py",
        "test_cli_tables.py",
        "test_core_install.py",
        "test_document_requests.py",
        "test_formats.py",
        "test_headers.py",
        "test_headers_heif.py",
        "test_hook.py",
        "test_ledger.py",
        "test_mcp.py",
        "test_media_errors.py",
        "test_media_truncated.py",
        "test_pricing_formulas.py",
        "test_proxy.py",
        "test_proxy_attribution.py",
        "test_proxy_metrics.py",
        "test_proxy_reliability.py",
        "test_proxy_server.py",
        "test_proxy_shrink.py",
        "test_proxy_streams.py",
        "test_proxy_usage.py",
        "test_remote.py",
        "test_request_fuzz.py",
        "test_requests.py",
        "test_shrink_request.py",
    }
)
# Tests in those files that check something an extra adds, or compare with a library of one: they run in .venv.
# Patterns (fnmatch) over file::name[parameters].
NEEDS_AN_EXTRA = frozenset(
    {
        "test_ledger.py::*postgresql*",  # sql: the PostgreSQL ledger
        "test_cli_price.py::test_price_takes_token_files*",  # models: tokenize makes the token files
        "test_cli_stdin.py::test_tokenize_then_truncate_through_stdin*",  # models
        "test_ledger.py::test_a_database_url_hides_its_password*",  # sql
        "test_ledger.py::test_the_html_report_has_its_figures_and_data*",  # report (matplotlib)
        "test_ledger.py::test_the_html_report_has_spend_by_key_and_by_each_tag*",  # report (matplotlib)
        "test_media_errors.py::test_nan_and_inf_samples*",  # models: decoded waveforms as tensors
        "test_media_truncated.py::test_a_faststart_mp4_cut_short_is_refused_at_load_by_its_own_index*",  # models
        "test_media_truncated.py::test_a_container_cut_short_past_its_index_is_refused_when_decoded*",  # models
        "test_media_truncated.py::test_a_video_shorter_than_its_sound_track_is_not_taken_for_a_cut_file*",  # models
        "test_pricing_formulas.py::test_qwen2_vl_smart_resize_matches_transformers*",  # eval: transformers' own
        "test_pricing_formulas.py::test_llava_next_anyres_matches_transformers*",  # eval: transformers' own
    }
)


def _is_core(nodeid: str) -> bool:
    path, _, name = nodeid.partition("::")
    file = Path(path).name
    test = f"{file}::{name}"
    return file in CORE_TESTS and not any(fnmatch.fnmatchcase(test, pattern) for pattern in NEEDS_AN_EXTRA)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """On the core install, a test file with no core test is not imported."""
    if CORE_ONLY and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return collection_path.name not in CORE_TESTS
    return None


def pytest_configure(config: pytest.Config) -> None:
    """xdist starts its workers with COLUMNS=80 (the controller's pipe): each worker gets the controller's COLUMNS
    back, so the CLI's tables are as wide in a worker as in one process (200 columns on a pipe without COLUMNS)."""
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers): remember what it had
        os.environ["MMTOK_TESTS_COLUMNS"] = os.environ.get("COLUMNS", "")
        return
    _share_the_cores(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if "MMTOK_TESTS_COLUMNS" in os.environ:
        columns = os.environ["MMTOK_TESTS_COLUMNS"]
        if columns:
            os.environ["COLUMNS"] = columns
        else:
            os.environ.pop("COLUMNS", None)


def _share_the_cores(workers: int) -> None:
    """Each worker's math libraries (torch, OpenBLAS, onnxruntime's OpenMP) use its share of the cores, not all of
    them: two workers each starting as many threads as there are cores only contend. Set before torch is imported
    (the test modules import it); a value the caller set is kept."""
    share = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(name, share)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_core(item.nodeid):
            item.add_marker(pytest.mark.core)


@pytest.fixture(scope="session")
def samples() -> Path:
    return samples_dir()


@pytest.fixture(scope="session")
def qa_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user cache's ``backbone-data`` folder once a digits-QA run has made its files there (the held-out
    canvases' token ids: tokenizing 1,000 of them takes half a minute), as the tests that use the user cache find it:
    one real one-item ``mmtok eval run``, which finds them there when an earlier test made them."""
    from typer.testing import CliRunner

    from mmtok.cache import cache_dir
    from mmtok.cli.main import app

    work = tmp_path_factory.mktemp("qa-cache")
    suite = work / "qa.toml"
    suite.write_text(
        '[dataset]\nkind = "qa"\nsource = "builtin:digits-qa"\nlimit = 1\n[metrics]\nnames = ["accuracy"]\n'
    )
    result = CliRunner().invoke(app, ["eval", "run", str(suite), "--out", str(work / "run")])
    assert result.exit_code == 0, result.output
    return cache_dir("backbone-data")


@pytest.fixture
def seeded_cache(tmp_path: Path, qa_cache: Path) -> Path:
    """A cache folder of this test's own (for ``MMTOK_CACHE_DIR``) that starts with :func:`qa_cache`'s files
    (linked, not copied): what the test caches stays its own; the derived digits data is not made again."""
    import shutil

    folder = tmp_path / "cache"
    shutil.copytree(qa_cache, folder / qa_cache.name, copy_function=os.link)
    return folder


@pytest.fixture(autouse=True)
def pillow_pixel_limit():
    """`--max-pixels` above Pillow's own limit raises Pillow's (a process-wide setting, as a CLI run should);
    the CLI tests run in this process, so each test gets Pillow's limit back."""
    import PIL.Image

    limit = PIL.Image.MAX_IMAGE_PIXELS
    yield
    PIL.Image.MAX_IMAGE_PIXELS = limit
