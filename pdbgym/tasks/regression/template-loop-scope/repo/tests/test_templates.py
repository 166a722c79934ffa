import pytest

from tmpl.lexer import TemplateSyntaxError
from tmpl.render import UndefinedVariable, UnknownFilter, render

ORDER = {
    "customer": {"name": "ada lovelace"},
    "currency": "EUR",
    "lines": [{"sku": "pen", "total": 3.5}, {"sku": "ink", "total": 1234.5}],
    "sections": [{"title": "tools", "items": ["saw", "drill"]}, {"title": "paint", "items": ["red"]}],
}


def test_variable_and_filters():
    assert render("Dear {{ customer.name | title }},", ORDER) == "Dear Ada Lovelace,"


def test_loop_over_own_variable():
    assert render("{% for line in lines %}[{{ line.sku | upper }}]{% endfor %}", ORDER) == "[PEN][INK]"


def test_if_else():
    template = "{% if discount %}with discount{% else %}full price{% endif %}"
    assert render(template, {"discount": 0}) == "full price"
    assert render(template, {"discount": 5}) == "with discount"


def test_undefined_variable_names_line():
    with pytest.raises(UndefinedVariable, match="line 2: 'customer.email'"):
        render("Hi\n{{ customer.email }}", ORDER)


def test_unknown_filter():
    with pytest.raises(UnknownFilter, match="shout"):
        render("{{ currency | shout }}", ORDER)


def test_unclosed_block():
    with pytest.raises(TemplateSyntaxError, match="line 1"):
        render("{% for line in lines %}{{ line.sku }}", ORDER)


def test_loop_shadows_outer_name():
    values = {"item": "outer", "items": ["a", "b"]}
    assert render("{% for item in items %}{{ item }}{% endfor %}{{ item }}", values) == "abouter"


def test_loop_body_sees_outer_values():
    template = "{% for line in lines %}{{ line.sku }}: {{ line.total | money }} {{ currency }}\n{% endfor %}"
    assert render(template, ORDER) == "pen: 3.50 EUR\nink: 1,234.50 EUR\n"


def test_nested_loops():
    template = "{% for s in sections %}{% for i in s.items %}{{ s.title }}/{{ i }} {% endfor %}{% endfor %}"
    assert render(template, ORDER) == "tools/saw tools/drill paint/red "


def test_child_scope_sees_parent_names():
    from tmpl.context import Context

    inner = Context({"a": 1}).child({"b": 2}).child({"c": 3})
    assert [inner.lookup([name]) for name in "abc"] == [1, 2, 3]
