from rowcheck import Schema, validate_rows

SIGNUPS = Schema({
    "email": ["required", "email"],
    "plan": ["required", ("one_of", ["free", "team", "enterprise"])],
    "seats": [("between", 1, 500)],
})


def test_clean_rows_have_no_problems():
    rows = [{"email": "ada@example.org", "plan": "team", "seats": "12"}]
    assert validate_rows(SIGNUPS, rows) == []


def test_unknown_columns_are_reported():
    rows = [{"email": "ada@example.org", "plan": "free", "seats": "1", "coupon": "X"}]
    assert [str(p) for p in validate_rows(SIGNUPS, rows)] == ["line 2: coupon is not a known column"]


def test_each_field_is_checked_with_its_own_value():
    rows = [
        {"email": "ada@example.org", "plan": "gold", "seats": "3"},
        {"email": "not-an-address", "plan": "free", "seats": "900"},
    ]
    assert [str(p) for p in validate_rows(SIGNUPS, rows)] == [
        "line 2: plan must be one of enterprise, free, team",
        "line 3: email is not an e-mail address",
        "line 3: seats must be between 1 and 500",
    ]


def test_line_numbers_follow_the_header():
    schema = Schema({"sku": ["required", ("max_length", 6)]})
    rows = [{"sku": "A-100"}, {"sku": ""}, {"sku": "B-20000"}]
    assert [str(p) for p in validate_rows(schema, rows)] == [
        "line 3: sku is required",
        "line 4: sku is longer than 6 characters",
    ]


def test_first_line_can_be_moved_for_files_with_a_preamble():
    schema = Schema({"plan": [("one_of", ["free", "team"])]})
    problems = validate_rows(schema, [{"plan": "team"}, {"plan": "gold"}], first_line=5)
    assert [(p.line, p.field) for p in problems] == [(6, "plan")]
