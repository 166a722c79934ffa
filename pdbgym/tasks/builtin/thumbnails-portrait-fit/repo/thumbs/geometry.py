"""Sizes and boxes in whole pixels."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    width: int
    height: int

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"size must be positive, got {self.width}x{self.height}")

    @property
    def aspect(self) -> float:
        return self.width / self.height


@dataclass(frozen=True)
class Box:
    left: int
    top: int
    right: int  # exclusive
    bottom: int  # exclusive

    @property
    def size(self) -> Size:
        return Size(self.right - self.left, self.bottom - self.top)


def fit_within(image: Size, bounds: Size, allow_upscale: bool = False) -> Size:
    """The largest size with the image's aspect ratio that fits inside ``bounds``."""
    scale = min(bounds.width / image.width, bounds.height / image.width)
    if not allow_upscale:
        scale = min(scale, 1.0)
    return Size(max(1, round(image.width * scale)), max(1, round(image.height * scale)))


def center_crop(image: Size, aspect: float) -> Box:
    """The largest centred box with the given aspect ratio (width / height)."""
    if aspect <= 0:
        raise ValueError(f"aspect must be positive, got {aspect}")
    if image.aspect > aspect:
        width = round(image.height * aspect)
        left = (image.width - width) // 2
        return Box(left, 0, left + width, image.height)
    height = round(image.width / aspect)
    top = (image.height - height) // 2
    return Box(0, top, image.width, top + height)
