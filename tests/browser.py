"""Headless Chromium for report tests: the page's DOM as the browser built it, and a screenshot's pixels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (.ci/run installs it)")
# matplotlib's first two line colours: a page whose first plot drew two lines shows both.
FIRST_LINE_COLOURS = ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E))


def _flags(profile: Path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}"]


def dump_dom(page: Path, scratch: Path) -> str:
    """The page's DOM after Chromium loaded it (``scratch`` holds the browser profile)."""
    return subprocess.run([CHROMIUM, *_flags(scratch / "profile"), "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120).stdout


def screenshot(page: Path, scratch: Path, height: int) -> Path:
    shot = scratch / "shot.png"
    subprocess.run([CHROMIUM, *_flags(scratch / "profile"), f"--screenshot={shot}", f"--window-size=1200,{height}",
                    page.as_uri()], capture_output=True, timeout=120)
    return shot


def pixels_near(shot: Path, colour: tuple[int, int, int], tolerance: int = 30) -> int:
    """How many pixels of the screenshot are within ``tolerance`` (sum of channel differences) of ``colour``."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    return int((np.abs(pixels - colour).sum(axis=1) < tolerance).sum())
