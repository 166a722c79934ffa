import pytest

from thumbs import Box, Size, center_crop, fit_within


def test_landscape_photo_fits_the_box_width():
    assert fit_within(Size(4000, 3000), Size(400, 400)) == Size(400, 300)


def test_square_image_and_no_upscaling():
    assert fit_within(Size(1000, 1000), Size(256, 256)) == Size(256, 256)
    assert fit_within(Size(120, 80), Size(400, 400)) == Size(120, 80)


def test_portrait_photo_fits_the_box_height():
    assert fit_within(Size(3000, 4000), Size(400, 400)) == Size(300, 400)


def test_center_crop_to_square():
    assert center_crop(Size(4000, 3000), 1.0) == Box(500, 0, 3500, 3000)
    assert center_crop(Size(3000, 4000), 1.0).size == Size(3000, 3000)


def test_invalid_sizes():
    with pytest.raises(ValueError, match="must be positive"):
        Size(0, 10)
