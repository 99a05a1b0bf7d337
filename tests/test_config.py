"""mmtok's settings: the file, the environment over it, the flags over both, and one clear line for a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmtok.config import MAX_CONFIG_BYTES, Config, config_path, load_config
from mmtok.errors import ConfigError


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user config folder of the test's own, and none of mmtok's variables set."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in ("MMTOK_CONFIG", "MMTOK_MODEL", "MMTOK_KEEP", "MMTOK_CACHE_DIR", "MMTOK_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_no_settings_file_means_the_defaults(home):
    assert load_config() == Config()
    assert config_path() == home / "xdg" / "mmtok" / "config.toml"


def test_the_user_settings_file_is_read_with_folders_relative_to_it(home):
    file = _write(
        home / "xdg" / "mmtok" / "config.toml",
        'model = "claude-opus-4-7"\nkeep = ["ocr>=0.99", "ssim>=0.95"]\ncache = "cache"\nroots = ["~/work", "/srv"]\n',
    )
    config = load_config()
    assert config.model == "claude-opus-4-7" and config.keep == ("ocr>=0.99", "ssim>=0.95")
    assert config.cache == file.parent / "cache"
    assert config.roots == (Path("~/work").expanduser(), Path("/srv"))
    assert config.source == str(file)


def test_the_environment_overrides_the_file_and_flags_override_both(home, monkeypatch):
    file = _write(home / "s.toml", 'model = "gpt-4o"\nkeep = ["ssim>=0.9"]\nroots = ["/a"]\n')
    monkeypatch.setenv("MMTOK_CONFIG", str(file))
    monkeypatch.setenv("MMTOK_MODEL", "gemini-2.5-pro")
    monkeypatch.setenv("MMTOK_KEEP", "ocr>=0.98, ssim>=0.92")
    monkeypatch.setenv("MMTOK_CACHE_DIR", str(home / "c"))
    config = load_config()
    assert (config.model, config.keep, config.cache, config.roots) == (
        "gemini-2.5-pro", ("ocr>=0.98", "ssim>=0.92"), home / "c", (Path("/a"),)
    )  # fmt: skip
    flagged = config.override(model="claude-opus-4-7", keep=["ssim>=0.99"], roots=["/b"])
    assert flagged.model == "claude-opus-4-7" and flagged.keep == ("ssim>=0.99",)
    assert flagged.roots == (Path("/a"), Path("/b"))  # roots add up
    assert config.override() == config  # no flag given: nothing changes


def test_model_or_falls_back_to_each_surfaces_own_default(home):
    assert Config().model_or("gpt-4o") == "gpt-4o"
    assert Config(model="claude-opus-4-7").model_or("gpt-4o") == "claude-opus-4-7"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('modle = "gpt-4o"\n', "unknown setting 'modle' (known: model, keep, cache, roots)"),
        ("model = 4\n", "model must be a non-empty string, got 4"),
        ('keep = [1, "ssim>=0.9"]\n', "keep must be a list of strings"),
        ("model = \n", "invalid TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_it_and_the_setting(home, text, said):
    file = _write(home / "bad.toml", text)
    with pytest.raises(ConfigError) as raised:
        load_config(file)
    message = str(raised.value)
    assert message.startswith(f"{file}: ") and said in message and "\n" not in message


def test_a_named_file_must_exist(home, monkeypatch):
    monkeypatch.setenv("MMTOK_CONFIG", str(home / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml: no such settings file"):
        load_config()


def test_a_file_too_large_to_be_settings_is_refused_unread(home):
    file = home / "huge.toml"
    with open(file, "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: nothing to allocate
    with pytest.raises(ConfigError, match="a settings file is read up to"):
        load_config(file)


def test_the_configured_cache_becomes_the_processes_unless_the_environment_names_one(home):
    environ: dict[str, str] = {}
    Config(cache=home / "c").use_cache(environ)
    assert environ == {"MMTOK_CACHE_DIR": str(home / "c")}
    environ = {"MMTOK_CACHE_DIR": "/elsewhere"}
    Config(cache=home / "c").use_cache(environ)
    assert environ == {"MMTOK_CACHE_DIR": "/elsewhere"}


def test_a_settings_file_nested_too_deep_is_refused_in_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("model = " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ConfigError, match="nested 101 levels deep, over the limit of 32"):  # the key, then arrays
        load_config(path, environ={})
