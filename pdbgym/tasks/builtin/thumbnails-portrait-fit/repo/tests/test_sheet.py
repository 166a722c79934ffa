from thumbs import Box, Size, contact_sheet


def test_grid_of_landscape_photos():
    images = {f"IMG_{n}.jpg": Size(1600, 1200) for n in range(3)}
    sheet, tiles = contact_sheet(images, columns=2, cell=Size(200, 200), gap=10)
    assert sheet == Size(430, 430)
    assert [t.box for t in tiles] == [Box(10, 35, 210, 185), Box(220, 35, 420, 185), Box(10, 245, 210, 395)]


def test_every_thumbnail_stays_inside_its_cell():
    images = {"pano.jpg": Size(6000, 1000), "tower.jpg": Size(1000, 3000), "cat.jpg": Size(800, 800)}
    sheet, tiles = contact_sheet(images, columns=3, cell=Size(150, 150), gap=0)
    for index, tile in enumerate(tiles):
        cell = Box(index * 150, 0, index * 150 + 150, 150)
        assert cell.left <= tile.box.left and tile.box.right <= cell.right, tile
        assert cell.top <= tile.box.top and tile.box.bottom <= cell.bottom, tile
