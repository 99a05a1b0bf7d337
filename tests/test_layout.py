"""The package's layout: library code never imports a training script (``mmtok.models.train_*``). What the trainers
and their users share (the digits-QA task, data helpers, weight fingerprints) lives in library modules; only the
trainers themselves and the ``mmtok train`` command import trainers."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINERS = "mmtok.models.train_"
ALLOWED = {"cli/train.py"}  # the training command; models/train_*.py may import each other


def package_dirs() -> dict[str, str]:
    """Folder (relative to the checkout) -> the package it installs as, from pyproject.toml's package-dir."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {folder: package for package, folder in config["package-dir"].items()}


def module_name(path: Path, folders: dict[str, str]) -> str:
    relative = path.relative_to(ROOT)
    parts = [folders[relative.parts[0]], *relative.parts[1:-1]]
    return ".".join([*parts, path.stem] if path.stem != "__init__" else parts)


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, module) of every import in the file: ``import a.b``, ``from a.b import c`` (as ``a.b`` and
    ``a.b.c``, since c may be a module), relative imports resolved, and ``importlib.import_module("a.b")``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def library_files(folders: dict[str, str]) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_library_module_imports_a_training_script():
    folders = package_dirs()
    files = library_files(folders)
    assert {"mmtok", "models", "budgets", "cli", "eval"} <= set(folders) and len(files) > 50
    offenders = []
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED or (relative.startswith("models/train_") and path.parent.name == "models"):
            continue
        for line, name in imported_modules(path, module_name(path, folders)):
            if name.startswith(TRAINERS):
                offenders.append(f"{relative}:{line} imports {name}")
    assert not offenders, "library code imports a trainer (move what it needs to a library module):\n" + "\n".join(
        offenders
    )


def test_the_import_scan_sees_the_training_command_and_relative_imports(tmp_path):
    folders = package_dirs()
    train_cli = ROOT / "cli" / "train.py"
    assert any(n.startswith(TRAINERS) for _, n in imported_modules(train_cli, module_name(train_cli, folders)))
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from . import train_vq\nfrom .train_av import speech_files\nimport importlib\n"
        "importlib.import_module('mmtok.models.train_clip')\n"
    )
    names = {n for _, n in imported_modules(sample, "mmtok.models.sample")}
    assert {"mmtok.models.train_vq", "mmtok.models.train_av", "mmtok.models.train_clip"} <= names


def test_evals_library_imports_no_benchmark_or_tool():
    """eval/ holds the library (metrics, extractors, ASR, judge, suites, runs and the evaluation protocols) beside
    eval/bench/ (benchmarks) and eval/tools/ (generators, ablation runners): nothing outside those two folders, the
    tests and the trainers' CLI imports them."""
    folders = package_dirs()
    apart = ("mmtok.eval.bench", "mmtok.eval.tools")
    offenders = []
    for path in library_files(folders):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("eval/bench/", "eval/tools/")):
            continue
        for line, name in imported_modules(path, module_name(path, folders)):
            if name == apart[0] or name.startswith(f"{apart[0]}.") or name.startswith(apart[1]):
                offenders.append(f"{relative}:{line} imports {name}")
    assert not offenders, "library code imports a benchmark or a tool:\n" + "\n".join(offenders)
    assert (ROOT / "eval" / "bench" / "pricing.py").is_file() and (ROOT / "eval" / "tools" / "corpus.py").is_file()


MAX_FUNCTION_LINES = 60  # STYLE.md's "about 60 lines": a longer function is split where its steps are


def test_no_library_function_is_longer_than_about_sixty_lines():
    """Library code: every package folder except the benchmark and tool scripts (eval/bench, eval/tools), whose
    ``main`` functions print their reports step by step. A function's length runs from its ``def`` (decorators
    left out) to its last line, signature and docstring included."""
    folders = package_dirs()
    long = []
    for path in library_files(folders):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("eval/bench/", "eval/tools/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{relative}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


MAX_MODULE_LINES = 600  # issue 33: no room over 600 lines; a longer module is split by concern into a package


def test_no_library_module_is_longer_than_six_hundred_lines():
    """Library code as above (the benchmark and tool scripts apart): a module that grows past 600 lines becomes a
    package whose modules are its parts (``mmtok.models.training``: config, processes, optim, batches, state, loop,
    log)."""
    folders = package_dirs()
    long = []
    for path in library_files(folders):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("eval/bench/", "eval/tools/")):
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{relative}: {lines} lines")
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)


CONCERNS = {"pricing", "ledger", "calibrate", "proxy", "shrink", "planner"}  # budgets/: one package per concern
CORE_CONCERNS = CONCERNS - {"planner"}  # what `pip install mmtok` runs; the planner comes with the models extra


def test_budgets_holds_one_package_per_concern_and_no_loose_module():
    """Pricing, the ledger, calibration, the proxy, shrink and the planner are each one package under budgets/
    (issue 40): a module beside them would be a concern without a home."""
    budgets = ROOT / "budgets"
    loose = sorted(p.name for p in budgets.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules loose in budgets/ (move each into its concern's package): {loose}"
    packages = {p.parent.name for p in budgets.glob("*/__init__.py")}
    assert packages == CONCERNS, f"budgets/ packages {sorted(packages)}; the layout names {sorted(CONCERNS)}"


def test_every_package_folder_is_listed_for_the_wheel():
    """A package folder missing from pyproject.toml's packages is left out of the wheel: ``pip install mmtok`` would
    fail on its first import."""
    folders = package_dirs()
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_name(init, folders) for folder in folders for init in (ROOT / folder).rglob("__init__.py")}
    assert found - listed == set(), f"package folders missing from [tool.setuptools] packages: {sorted(found - listed)}"


def test_the_core_budget_packages_import_nothing_from_the_planner():
    """The planner (pymoo, torch: the models extra) sits apart from what the core runs: no pricing, ledger,
    calibration, proxy or shrink module imports it, even lazily."""
    folders = package_dirs()
    offenders = []
    for concern in sorted(CORE_CONCERNS):
        for path in sorted((ROOT / "budgets" / concern).rglob("*.py")):
            for line, name in imported_modules(path, module_name(path, folders)):
                if name == "mmtok.budgets.planner" or name.startswith("mmtok.budgets.planner."):
                    offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not offenders, "a core package imports the planner:\n" + "\n".join(offenders)
