"""Names a package exports but imports on first use (PEP 562), so that ``import mmtok`` and a command that prices a
photo load only what they use.

    __getattr__, __dir__ = lazy_exports(__name__, {"price": ".api"}, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, modules: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: each name in ``modules`` is imported from its module (absolute, or
    relative to ``package`` with a leading dot) on first use and kept in ``namespace``; ``__dir__`` lists
    ``namespace["__all__"]``."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(namespace["__all__"])

    return __getattr__, __dir__
