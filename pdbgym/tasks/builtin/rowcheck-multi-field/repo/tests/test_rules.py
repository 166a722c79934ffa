import pytest

from rowcheck import Schema, SchemaError


def test_required():
    schema = Schema({"name": ["required"]})
    assert schema.errors({"name": "  "}) == {"name": ["is required"]}
    assert schema.errors({"name": "Ada"}) == {}


def test_number_between():
    schema = Schema({"age": [("between", 0, 130)]})
    assert schema.errors({"age": "131"}) == {"age": ["must be between 0 and 130"]}
    assert schema.errors({"age": "x"}) == {"age": ["is not a number"]}
    assert schema.errors({"age": ""}) == {}


def test_email_and_length_together():
    schema = Schema({"email": ["email", ("max_length", 12)]})
    assert schema.errors({"email": "ada.lovelace@example"}) == {
        "email": ["is not an e-mail address", "is longer than 12 characters"]
    }


def test_unknown_rule_is_a_schema_error():
    with pytest.raises(SchemaError, match="unknown rule 'positive'"):
        Schema({"qty": ["positive"]})
