"""MkDocs hook: the result files, figures and example reports the pages link to are served from where they live in
the repository (``eval/results/``, ``budgets/examples/``), not copied into ``docs/``, so there is one copy of each."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

# Folders of the repository whose files the pages may link to, by their path from the repository root.
LINKED_FOLDERS = ("eval/results", "budgets/examples")
# Markdown files there are reports, not pages of this site: they are linked as their HTML twins.
NOT_PAGES = {".md"}


def on_files(files: Files, config) -> Files:
    root = Path(config.config_file_path).parent
    for folder in LINKED_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix not in NOT_PAGES:
                uri = path.relative_to(root).as_posix()
                files.append(
                    File(uri, src_dir=str(root), dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls)
                )
    return files
