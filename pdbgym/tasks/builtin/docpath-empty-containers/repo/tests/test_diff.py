from docpath import diff


def test_changed_added_removed_values():
    old = {"image": "api:1.4", "replicas": 2, "env": {"A": "1"}}
    new = {"image": "api:1.5", "env": {"A": "1", "B": "2"}}
    assert [str(change) for change in diff(old, new)] == [
        "+ env.B = '2'",
        "~ image: 'api:1.4' -> 'api:1.5'",
        "- replicas (was 2)",
    ]


def test_list_indices_sort_numerically():
    old = {"hosts": [f"h{i}" for i in range(11)]}
    new = {"hosts": [f"h{i}" for i in range(10)] + ["x"]}
    assert [str(change) for change in diff(old, new)] == ["~ hosts[10]: 'h10' -> 'x'"]


def test_type_change_is_a_change():
    assert [c.kind for c in diff({"port": 80}, {"port": 80.0})] == ["changed"]


def test_removing_an_empty_section_is_reported():
    old = {"name": "api", "annotations": {}}
    assert [str(change) for change in diff(old, {"name": "api"})] == ["- annotations (was {})"]
