"""Packaging metadata builds without setuptools deprecation warnings (they print on every install)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_metadata_builds_without_deprecation_warnings(tmp_path):
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "pdbgym").mkdir()
    (tmp_path / "pdbgym" / "__init__.py").write_text("")
    code = ("import tempfile, warnings, setuptools.build_meta as b; warnings.simplefilter('always'); "
            "print(b.prepare_metadata_for_build_wheel(tempfile.mkdtemp()))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pdbgym-0.1.0.dist-info" in done.stdout
    assert "Deprecat" not in done.stdout + done.stderr, done.stderr
