"""A passing pytest session leaves no ``tmp_path`` folders behind (pyproject's retention settings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_retention_settings_are_read(pytestconfig):
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"
    assert int(pytestconfig.getini("tmp_path_retention_count")) == 1


def test_a_passing_session_removes_its_tmp_paths_and_a_failing_one_keeps_only_the_failed(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "def test_big(tmp_path):\n    (tmp_path / 'blob').write_bytes(b'x' * 1000)\n\n"
        "def test_flag(tmp_path):\n    import os\n    assert not os.environ.get('FAIL_IT')\n")
    temproot = tmp_path / "temproot"
    temproot.mkdir()

    def session(fail: bool) -> list[Path]:
        env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(temproot), "FAIL_IT": "1" if fail else ""}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=120, check=False)
        return sorted(p for p in temproot.rglob("*") if p.is_dir() and not p.is_symlink() and p.name.startswith("test_"))

    assert session(fail=False) == []
    kept = session(fail=True)
    assert [p.name for p in kept] == ["test_flag0"]  # the failed test's folder, not the passing one's
