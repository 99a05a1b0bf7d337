"""The documentation site builds with ``mkdocs build --strict`` (every link, anchor and nav entry checked) and uses
nothing from the network: no web fonts, no scripts or styles from another host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_pages import ROOT

REMOTE_ASSET = re.compile(r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about its successor, not a build problem
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_site_builds_strict_with_a_page_per_concern(site):
    pages = {p.parent.name for p in site.glob("*/index.html")}
    assert {
        "pricing",
        "shrink",
        "tokenizers",
        "truncation",
        "moe",
        "eval",
        "planning",
        "security",
        "results",
        "changelog",
        "install",
    } <= pages


def test_site_loads_nothing_from_another_host(site):
    remote = [
        f"{page.relative_to(site)}: {match.group(0)}"
        for page in site.rglob("*.html")
        for match in REMOTE_ASSET.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not remote, remote[:5]
    assert not any("fonts.googleapis" in css.read_text(encoding="utf-8") for css in site.rglob("*.css"))


def test_figures_and_reports_the_pages_link_to_are_in_the_site(site):
    assert (site / "eval/results/truncation_sweep.png").is_file()
    assert (site / "budgets/examples/reports/voice-and-photos/report.html").is_file()


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if f" {p.name}\n" not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"
