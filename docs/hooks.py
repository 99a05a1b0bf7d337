"""MkDocs hooks. The result files, figures and example reports the pages link to are served from where they live in
the repository (``eval/results/``, ``budgets/examples/``), not copied into ``docs/``, so there is one copy of each.
A flag or name with a hyphen (``--one-request``, ``gemini-2.5-flash-lite``), in running text or in a code block that
wraps, is kept on one line: the browser would otherwise break it at the hyphen. So is a table's first cell when it is
short enough to be a name (docs/stylesheets/extra.css styles the ``nobr`` spans and ``name`` cells)."""

from __future__ import annotations

import re
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


PRE = re.compile(r"(<pre\b.*?</pre>)", re.S)  # code blocks: left as they are
INLINE_CODE = re.compile(r"<code>([^<]*)</code>")
HYPHENATED = re.compile(r"\S*-\S*")
LONGEST_UNBROKEN = 40  # characters: a longer token may break rather than run past the column
FIRST_CELL = re.compile(r"(<tr>\s*<t[dh])((?: [^>]*)?)>(.*?)(</t[dh]>)", re.S)
LONGEST_NAME = 32  # characters of a first cell's text kept on one line; longer is a description that may wrap
TAG = re.compile(r"<[^>]+>")
TAG_SPLIT = re.compile(r"(<[^>]+>)")


def _unbroken(match: re.Match[str]) -> str:
    def keep(token: re.Match[str]) -> str:
        text = token.group(0)
        return f'<span class="nobr">{text}</span>' if len(text) <= LONGEST_UNBROKEN else text

    return f"<code>{HYPHENATED.sub(keep, match.group(1))}</code>"


def _named(match: re.Match[str]) -> str:
    start, attributes, content, end = match.groups()
    if len(TAG.sub("", content).strip()) > LONGEST_NAME or "class=" in attributes:
        return match.group(0)
    return f'{start}{attributes} class="name">{content}{end}'


def _unbroken_block(block: str) -> str:
    """A code block whose hyphenated words (``--lossless``, ``/tmp/mmtok-readme-shrink``) wrap whole: only the text
    between its tags is touched, so the highlighter's spans stay as they are."""

    def keep(token: re.Match[str]) -> str:
        text = token.group(0)
        return f'<span class="nobr">{text}</span>' if len(text) <= LONGEST_UNBROKEN else text

    parts = TAG_SPLIT.split(block)
    return "".join(part if i % 2 else HYPHENATED.sub(keep, part) for i, part in enumerate(parts))


def on_page_content(html: str, page, config, files) -> str:
    parts = PRE.split(html)
    parts = [_unbroken_block(part) if i % 2 else INLINE_CODE.sub(_unbroken, part) for i, part in enumerate(parts)]
    return FIRST_CELL.sub(_named, "".join(parts))
