"""What each install of mmtok weighs: site-packages size and package list of a fresh venv per extra.

Run: ``python -m mmtok.eval.tools.install_sizes [--extras core shrink report models eval sql docs all]`` (writes
``eval/results/install_sizes.json`` and ``.txt``; PyPI or pip's cache must be reachable; the torch extras take a few
GB and minutes each).

For each choice: the wheel of this checkout is built once; a new venv (``python -m venv``, with its own pip and
setuptools) gets ``pip install 'mmtok-<version>.whl[<extra>]'`` (the core: no extra); then site-packages is measured
two ways, the bytes of its files (apparent size) and the disk it takes (``du``: blocks), with the empty venv's own
(pip, setuptools) measured the same way and given beside, and ``pip list`` is kept. Whether torch, any CUDA library
(``nvidia-*``), triton or OpenCV (``cv2``) was installed is said per install. Each venv is removed after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "eval" / "results"
CHOICES = ("core", "heif", "shrink", "report", "models", "eval", "sql", "docs", "all")
LIMITS_MB = {"core": 400, "shrink": 1000}  # issue 40: the core and mmtok[shrink]
HEAVY = {"torch": "torch", "torchvision": "torchvision", "torchaudio": "torchaudio", "triton": "triton",
         "opencv-python": "OpenCV", "opencv-python-headless": "OpenCV"}  # fmt: skip


def build_wheel(folder: Path) -> Path:
    """This checkout's wheel (built from a copy: setuptools writes build/ beside the sources)."""
    import shutil

    source = folder / "source"
    ignore = shutil.ignore_patterns(".venv*", ".git", "build", "*.egg-info", "__pycache__", "mmtok-demo", ".cache")
    shutil.copytree(ROOT, source, ignore=ignore)
    wheels = folder / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)]
    subprocess.run(command, check=True)
    return next(wheels.glob("mmtok-*.whl"))


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def measure(folder: Path) -> dict[str, int]:
    """Apparent bytes of the files under ``folder`` and the disk they take (512-byte blocks, as du counts)."""
    apparent = blocks = 0
    for root, _, files in os.walk(folder):
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            apparent += stat.st_size
            blocks += stat.st_blocks
    return {"apparent_bytes": apparent, "disk_bytes": blocks * 512}


def install(wheel: Path, choice: str, work: Path) -> dict[str, Any]:
    """A fresh venv with ``wheel[choice]``: its sizes and packages."""
    import shutil

    venv = work / f"venv-{choice}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    empty = measure(site_packages(venv))
    target = str(wheel) if choice == "core" else f"{wheel}[{choice}]"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", target], check=True)
    sizes = measure(site_packages(venv))
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    packages = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}
    shutil.rmtree(venv)
    heavy = sorted({label for name, label in HEAVY.items() if name in packages})
    cuda = sorted(name for name in packages if name.startswith("nvidia-"))
    return {
        "extra": choice,
        "pip_install": "pip install mmtok" if choice == "core" else f"pip install 'mmtok[{choice}]'",
        "site_packages": sizes,
        "empty_venv_site_packages": empty,
        "mb": round(sizes["apparent_bytes"] / 1e6, 1),
        "mb_without_pip": round((sizes["apparent_bytes"] - empty["apparent_bytes"]) / 1e6, 1),
        "disk_mb": round(sizes["disk_bytes"] / 1e6, 1),
        "limit_mb": LIMITS_MB.get(choice),
        "heavy": heavy,
        "cuda_packages": cuda,
        "package_count": len(packages),
        "packages": packages,
    }


def report(rows: list[dict[str, Any]], python: str) -> str:
    lines = [
        f"install_sizes: site-packages of a fresh venv per install of this checkout's wheel ({python}); MB = 10^6 "
        "bytes of files (apparent), disk = blocks taken; the empty venv's pip and setuptools are counted in MB and "
        "given apart",
        "",
        f"  {'install':<30} {'MB':>8} {'w/o pip':>8} {'disk MB':>8} {'limit':>6} {'pkgs':>5}  torch/CUDA/OpenCV",
    ]
    for r in rows:
        limit = f"{r['limit_mb']}" if r["limit_mb"] else ""
        heavy = ", ".join(r["heavy"] + ([f"{len(r['cuda_packages'])} CUDA packages"] if r["cuda_packages"] else []))
        lines.append(
            f"  {r['pip_install']:<30} {r['mb']:8.1f} {r['mb_without_pip']:8.1f} {r['disk_mb']:8.1f} {limit:>6} "
            f"{len(r['packages']):5d}  {heavy or 'none'}"
        )
    lines += ["", "packages per install (name version):"]
    for r in rows:
        lines.append(f"  {r['pip_install']}: " + ", ".join(f"{n} {v}" for n, v in sorted(r["packages"].items())))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", nargs="+", default=list(CHOICES), choices=CHOICES)
    parser.add_argument("--json", type=Path, default=RESULTS / "install_sizes.json")
    parser.add_argument("--txt", type=Path, default=RESULTS / "install_sizes.txt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mmtok-sizes-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work)
        rows = []
        for choice in args.extras:
            rows.append(install(wheel, choice, work))
            print(f"{rows[-1]['pip_install']}: {rows[-1]['mb']} MB, {len(rows[-1]['packages'])} packages", flush=True)
    python = f"Python {sys.version.split()[0]}"
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"tool": "install_sizes", "python": python, "installs": rows}, indent=1) + "\n")
    text = report(rows, python)
    args.txt.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
