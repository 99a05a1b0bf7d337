"""The documentation site builds with ``mkdocs build --strict`` (every link, anchor and nav entry checked) and uses
nothing from the network: no web fonts, no scripts or styles from another host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs_pages import ROOT
from tests.docs_site import build_site

REMOTE_ASSET = re.compile(r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory.mktemp("site"))


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
