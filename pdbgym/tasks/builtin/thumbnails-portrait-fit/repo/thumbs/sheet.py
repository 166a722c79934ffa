"""Contact sheets: thumbnails laid out in a grid, each centred in its cell."""

from __future__ import annotations

import math
from dataclasses import dataclass

from thumbs.geometry import Box, Size, fit_within


@dataclass(frozen=True)
class Tile:
    name: str
    box: Box  # where the thumbnail goes on the sheet


def contact_sheet(images: dict[str, Size], columns: int, cell: Size, gap: int = 8) -> tuple[Size, list[Tile]]:
    """Lay out ``images`` (in the given order) in rows of ``columns`` cells of size ``cell``."""
    if columns < 1:
        raise ValueError("columns must be >= 1")
    if not images:
        raise ValueError("no images to lay out")
    rows = math.ceil(len(images) / columns)
    sheet = Size(columns * cell.width + (columns + 1) * gap, rows * cell.height + (rows + 1) * gap)
    tiles = []
    for index, (name, size) in enumerate(images.items()):
        row, column = divmod(index, columns)
        thumb = fit_within(size, cell)
        cell_left = gap + column * (cell.width + gap)
        cell_top = gap + row * (cell.height + gap)
        left = cell_left + (cell.width - thumb.width) // 2
        top = cell_top + (cell.height - thumb.height) // 2
        tiles.append(Tile(name, Box(left, top, left + thumb.width, top + thumb.height)))
    return sheet, tiles
