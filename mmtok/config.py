"""mmtok's settings in one place: the model, the quality bars, the cache folder and the folders a server may read.

A TOML file, found at ``MMTOK_CONFIG`` or else ``config.toml`` in the user config folder
(``platformdirs.user_config_dir("mmtok")``: ``~/.config/mmtok/config.toml`` on Linux)::

    model = "claude-opus-4-7"          # the model to price and shrink for when none is named
    keep = ["ssim>=0.95", "ocr>=0.98"]  # quality bars for shrink (default: shrink's own)
    cache = "~/.cache/mmtok"            # the cache folder (as MMTOK_CACHE_DIR)
    roots = ["~/projects"]              # folders `mmtok mcp` reads files under (besides --root)

Environment variables override the file (``MMTOK_MODEL``, ``MMTOK_KEEP`` as comma-separated bars,
``MMTOK_CACHE_DIR``, ``MMTOK_ROOTS`` as an ``os.pathsep``-separated list), and a command's flags override both
(:meth:`Config.override`). A missing default file is no error: the defaults apply. The file is data: it names
models, bars and folders, never code. Bars are checked where they are used (``mmtok.budgets.shrink.make_bars``),
as this core module imports nothing from the budgets.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mmtok.errors import ConfigError

MAX_CONFIG_BYTES = 1024 * 1024  # a settings file is a few lines; anything larger is not one
KEYS = ("model", "keep", "cache", "roots")


@dataclass(frozen=True)
class Config:
    """The settings in force, and where they came from (for messages)."""

    model: str | None = None  # None: each command's own default
    keep: tuple[str, ...] = ()  # quality bars as written ("ocr>=0.98"); empty: shrink's defaults
    cache: Path | None = None  # None: MMTOK_CACHE_DIR or the user cache folder
    roots: tuple[Path, ...] = ()  # folders `mmtok mcp` may read files under
    source: str = "defaults"

    def override(
        self,
        *,
        model: str | None = None,
        keep: Iterable[str] = (),
        cache: str | os.PathLike[str] | None = None,
        roots: Iterable[str | os.PathLike[str]] = (),
    ) -> Config:
        """These settings with what a command's flags give: a flag given replaces the setting; roots add up."""
        keep = tuple(keep)
        added = tuple(_folder(r, Path.cwd()) for r in roots)
        return dataclasses.replace(
            self,
            model=model or self.model,
            keep=keep or self.keep,
            cache=_folder(cache, Path.cwd()) if cache else self.cache,
            roots=tuple(dict.fromkeys((*self.roots, *added))),
        )

    def model_or(self, default: str) -> str:
        """The configured model, else ``default`` (each surface has its own: the CLI's is ``gpt-4o``)."""
        return self.model or default

    def use_cache(self, environ: dict[str, str] | None = None) -> None:
        """Make the configured cache folder this process's (``MMTOK_CACHE_DIR``), so every cache mmtok keeps goes
        there. An environment that names one already keeps it. For a command's own process (the MCP server, a
        hook), not for a library caller."""
        environ = os.environ if environ is None else environ
        if self.cache is not None and not environ.get("MMTOK_CACHE_DIR"):
            environ["MMTOK_CACHE_DIR"] = str(self.cache)


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The settings file: ``MMTOK_CONFIG``, else ``config.toml`` in the user config folder."""
    environ = os.environ if environ is None else environ
    named = environ.get("MMTOK_CONFIG")
    if named:
        return Path(named).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("mmtok", appauthor=False)) / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """The settings: the file (``path``, else :func:`config_path`), then the environment over it.

    A file named explicitly (``path`` or ``MMTOK_CONFIG``) must exist; the default one may not. Raises
    :class:`ConfigError` naming the file and the key for a file that cannot be read, an unknown key or a value of
    the wrong type."""
    environ = os.environ if environ is None else environ
    named = path is not None or bool(environ.get("MMTOK_CONFIG"))
    file = Path(path).expanduser() if path is not None else config_path(environ)
    config = _from_file(file, required=named)
    return _from_environ(config, environ)


def _from_file(file: Path, *, required: bool) -> Config:
    if not file.is_file():
        if required or file.exists():
            raise ConfigError(f"{file}: no such settings file" if not file.exists() else f"{file}: not a file")
        return Config()
    data = _read_toml(file)
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"{file}: unknown setting {unknown[0]!r} (known: {', '.join(KEYS)})")
    base = file.parent
    return Config(
        model=_text(data, "model", file),
        keep=_texts(data, "keep", file),
        cache=_folder(_text(data, "cache", file), base),
        roots=tuple(_folder(r, base) for r in _texts(data, "roots", file)),
        source=str(file),
    )


def _read_toml(file: Path) -> dict[str, object]:
    """The settings file through mmtok's one checked TOML reader (a regular file, its size and nesting bounded)."""
    from mmtok.files import read_toml

    try:
        size = file.stat().st_size
    except OSError as e:
        raise ConfigError(f"{file}: cannot read it: {e.strerror or e}") from None
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{file}: {size:,} bytes; a settings file is read up to {MAX_CONFIG_BYTES:,}")
    return read_toml(file, "a settings file", ConfigError)


def _text(data: Mapping[str, object], key: str, file: Path) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{file}: {key} must be a non-empty string, got {value!r}")
    return value.strip()


def _texts(data: Mapping[str, object], key: str, file: Path) -> tuple[str, ...]:
    value = data.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{file}: {key} must be a list of strings, got {value!r}")
    return tuple(v.strip() for v in value)


def _folder(value: str | os.PathLike[str] | None, base: Path) -> Path | None:
    """A folder setting: ``~`` expanded, relative to ``base`` (the settings file's folder), made absolute."""
    if value is None:
        return None
    path = Path(value).expanduser()
    return Path(os.path.abspath(base / path))


def _from_environ(config: Config, environ: Mapping[str, str]) -> Config:
    changes: dict[str, object] = {}
    if environ.get("MMTOK_MODEL", "").strip():
        changes["model"] = environ["MMTOK_MODEL"].strip()
    if environ.get("MMTOK_KEEP", "").strip():
        changes["keep"] = tuple(b.strip() for b in environ["MMTOK_KEEP"].split(",") if b.strip())
    if environ.get("MMTOK_CACHE_DIR", "").strip():
        changes["cache"] = _folder(environ["MMTOK_CACHE_DIR"].strip(), Path.cwd())
    if environ.get("MMTOK_ROOTS", "").strip():
        roots = [r for r in environ["MMTOK_ROOTS"].split(os.pathsep) if r.strip()]
        changes["roots"] = tuple(_folder(r.strip(), Path.cwd()) for r in roots)
    return dataclasses.replace(config, **changes) if changes else config
