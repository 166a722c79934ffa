"""thumbs: the geometry behind thumbnails (no pixels are touched here)."""

from thumbs.geometry import Box, Size, center_crop, fit_within
from thumbs.sheet import Tile, contact_sheet

__all__ = ["Box", "Size", "Tile", "center_crop", "contact_sheet", "fit_within"]
