import pytest

from calc import LexError, tokenize


def kinds(text):
    return [token.kind for token in tokenize(text)]


def test_numbers_and_operators():
    assert kinds("1+2.5*3") == ["NUMBER", "OP", "NUMBER", "OP", "NUMBER", "END"]
    assert [t.text for t in tokenize("2**10")] == ["2", "**", "10", ""]


def test_whitespace_is_skipped_and_positions_kept():
    tokens = tokenize("  width *\theight ")
    assert [(t.kind, t.position) for t in tokens] == [("NAME", 2), ("OP", 8), ("NAME", 10), ("END", 17)]


def test_scientific_notation():
    assert [t.text for t in tokenize("1.5e3 + 2E-2")][:3] == ["1.5e3", "+", "2E-2"]


def test_unexpected_character_is_reported_with_its_column():
    with pytest.raises(LexError) as info:
        tokenize("price * 1.2 $ 3")
    assert info.value.position == 12
    assert "column 13" in str(info.value)
