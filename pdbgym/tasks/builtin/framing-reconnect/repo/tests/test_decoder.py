from framing import LineDecoder


def test_lines_split_across_chunks():
    decoder = LineDecoder()
    assert decoder.feed(b"METRIC cpu=0.5\nMETR") == [b"METRIC cpu=0.5"]
    assert decoder.feed(b"IC mem=12\r\n\n") == [b"METRIC mem=12"]


def test_over_long_line_is_dropped_and_decoding_recovers():
    decoder = LineDecoder(max_line=16)
    assert decoder.feed(b"EVENT msg=" + b"x" * 30) == []
    assert decoder.feed(b"yyyy\nBYE\n") == [b"BYE"]
    assert decoder.dropped_lines == 1


def test_reset_forgets_a_partial_line():
    decoder = LineDecoder()
    decoder.feed(b"METRIC cpu=0.")
    decoder.reset()
    assert decoder.feed(b"HELLO id=7\n") == [b"HELLO id=7"]
