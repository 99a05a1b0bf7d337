"""Tables read whole at 80 columns: paths fold between folders, never inside a file name, and a folder's files are
named relative to the folder given (inspect, price, tokenize's tables: every command that takes ``paths``)."""

from __future__ import annotations

import shutil

from rich.console import Console
from rich.markup import escape
from typer.testing import CliRunner

from mmtok.cli.common import Column, fit_table, fold_at_separators, input_folders, short_path
from mmtok.cli.main import app

runner = CliRunner()
LONG_NAMES = ("tram-28-at-the-miradouro-da-graca.jpg", "interview-with-the-harbour-master.wav")


def _album(samples, root):
    """Two sample files under deep folders, with long names."""
    folder = root / "holiday-photos-2019" / "lisbon-and-the-coast" / "day-three"
    folder.mkdir(parents=True)
    shutil.copy(samples / "chelsea.jpg", folder / LONG_NAMES[0])
    shutil.copy(samples / "speech.wav", folder / LONG_NAMES[1])
    return root / "holiday-photos-2019"


def _plain(cell) -> list[str]:
    return fold_at_separators(cell, 12).plain.split("\n")


def test_a_path_folds_after_a_separator_never_inside_a_name():
    assert _plain("photos/2019/lisbon/tram.jpg") == ["photos/2019/", "lisbon/", "tram.jpg"]
    assert _plain("a/very-long-file-name.jpg") == ["a/", "very-long-file-name.jpg"]  # too wide: left whole
    assert _plain("one two three four") == ["one two", "three four"]
    assert _plain("short/path") == ["short/path"]


def test_folding_keeps_what_the_markup_means():
    folded = fold_at_separators(escape("scans/[draft]/page-one.png"), 8)
    assert folded.plain.split("\n") == ["scans/", "[draft]/", "page-one.png"]
    bold = fold_at_separators("[bold]photos/2019/tram.jpg[/bold]", 8)
    assert bold.plain.split("\n") == ["photos/", "2019/", "tram.jpg"] and all(s.style == "bold" for s in bold.spans)


def test_a_table_too_narrow_for_a_name_keeps_the_name_whole_and_says_how_wide_it_is():
    rows = [["deep/folder/" + LONG_NAMES[0], "1,234"]]
    table, dropped, needed = fit_table([Column("path", fold=True), Column("bytes", numeric=True)], rows, 30)
    console = Console(width=needed, record=True)
    console.print(table)
    assert not dropped and any(line.strip().startswith(LONG_NAMES[0]) for line in console.export_text().splitlines())


def test_inspect_at_80_columns_shows_each_file_name_whole_relative_to_the_folder(samples, tmp_path, monkeypatch):
    album = _album(samples, tmp_path)
    monkeypatch.chdir(samples)  # the album is not under the working folder: its names would be absolute
    result = runner.invoke(app, ["inspect", str(album)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.stdout
    for name in LONG_NAMES:
        assert sum(name in line for line in lines) == 1, result.stdout  # whole, on one line
    assert str(tmp_path) not in result.stdout and "lisbon-and-the-coast/" in result.stdout


def test_price_names_a_folders_files_relative_to_it_at_80_columns(samples, tmp_path, monkeypatch):
    album = _album(samples, tmp_path)
    monkeypatch.chdir(samples)
    result = runner.invoke(app, ["price", str(album), "-m", "gemini-3-flash-preview"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert str(tmp_path) not in result.stdout
    assert all(any(name in line for line in result.stdout.splitlines()) for name in LONG_NAMES)


def test_files_of_several_folders_are_named_from_each_folder_and_same_named_folders_keep_longer_names(tmp_path):
    for folder in ("a/photos", "b/photos", "c/scans"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x.jpg").write_bytes(b"")
    file = tmp_path / "a/photos/x.jpg"
    with input_folders([tmp_path / "a/photos"]):
        assert short_path(file) == "x.jpg"
    with input_folders([tmp_path / "a/photos", tmp_path / "c/scans"]):
        assert short_path(file) == "photos/x.jpg" and short_path(tmp_path / "c/scans/x.jpg") == "scans/x.jpg"
    with input_folders([tmp_path / "a/photos", tmp_path / "b/photos"]):  # photos/x.jpg twice: the path as given
        assert short_path(file) == str(file)
    assert short_path(file) == str(file)  # outside a command, a file outside the working folder keeps its path


def test_a_file_named_with_an_emoji_code_is_shown_as_named(samples, tmp_path):
    """rich turned ``:smile:`` in a file name into an emoji (cat:smile:.jpg was shown as cat😄.jpg)."""
    photo = tmp_path / "cat:smile:.jpg"
    shutil.copy(samples / "chelsea.jpg", photo)
    result = runner.invoke(app, ["price", "-m", "gpt-4o", str(tmp_path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "cat:smile:.jpg" in result.output and "😄" not in result.output
