import pytest

from mailmerge import RenderError, placeholders, render, required_fields

ORDER = {"customer": {"name": "ada lovelace"}, "order": {"id": "A-17", "total": 1234.5}}


def test_single_placeholder_with_filters():
    assert render("Dear {{ customer.name | first_name | title }},", ORDER) == "Dear Ada,"


def test_placeholder_positions():
    [placeholder] = placeholders("Total: {{order.total|money}}")
    assert (placeholder.start, placeholder.end, placeholder.filters) == (7, 28, ("money",))


def test_missing_field_names_the_path():
    with pytest.raises(RenderError, match="no value for 'order.currency'"):
        render("{{ order.currency }}", ORDER)


def test_unknown_filter():
    with pytest.raises(RenderError, match="unknown filter 'bold'"):
        render("{{ order.id | bold }}", ORDER)


def test_text_without_placeholders_is_unchanged():
    assert render("No {braces} here }}", ORDER) == "No {braces} here }}"


def test_several_placeholders_on_one_line():
    text = "Order {{ order.id }} for {{ customer.name | title }}: {{ order.total | money }}"
    assert render(text, ORDER) == "Order A-17 for Ada Lovelace: $1,234.50"


def test_required_fields_in_order_of_use():
    text = "{{ customer.name }} / {{ order.id }} / {{ customer.name | upper }}"
    assert required_fields(text) == ["customer.name", "order.id"]
