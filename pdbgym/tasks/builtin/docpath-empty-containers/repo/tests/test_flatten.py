from docpath import flatten, unflatten

SERVICE = {
    "name": "api",
    "replicas": 3,
    "ports": [{"port": 80, "tls": False}, {"port": 443, "tls": True}],
    "env": {"LOG_LEVEL": "info", "DEBUG": None},
}


def test_flatten_nested_document():
    assert flatten(SERVICE) == {
        "name": "api",
        "replicas": 3,
        "ports[0].port": 80,
        "ports[0].tls": False,
        "ports[1].port": 443,
        "ports[1].tls": True,
        "env.LOG_LEVEL": "info",
        "env.DEBUG": None,
    }


def test_unflatten_rebuilds_the_document():
    assert unflatten(flatten(SERVICE)) == SERVICE


def test_unflatten_accepts_paths_in_any_order():
    assert unflatten({"a[1]": "y", "a[0]": "x", "b.c[0].d": 1}) == {"a": ["x", "y"], "b": {"c": [{"d": 1}]}}


def test_empty_containers_survive_a_round_trip():
    document = {"name": "worker", "volumes": [], "labels": {}, "ports": [{"port": 80, "hosts": []}]}
    assert unflatten(flatten(document)) == document
