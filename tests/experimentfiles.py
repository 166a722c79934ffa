"""The repository's experiment files as the experiment tests read them, and the quick profile on a tiny model."""

from __future__ import annotations

from pathlib import Path

REPO_FILE = Path(__file__).resolve().parents[1] / "experiments" / "smollm2-ladder.toml"


def quick_file(tmp_path: Path, base: Path) -> Path:
    """The repository's ladder file with ``base`` (a tiny model folder) in place of the embedded model."""
    path = tmp_path / "experiment.toml"
    path.write_text(REPO_FILE.read_text().replace('base = "embedded"', f'base = "{base}"'))
    return path
