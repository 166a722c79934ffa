from pipeline import Slot, Step, build_schedule, critical_path, makespan

CHAIN = [Step("checkout", 1), Step("build", 4, ("checkout",)), Step("test", 6, ("build",))]


def test_chain_runs_back_to_back():
    slots = build_schedule(CHAIN, start=10)
    assert slots == {"checkout": Slot(10, 11), "build": Slot(11, 15), "test": Slot(15, 21)}
    assert makespan(slots) == 11


def test_join_waits_for_the_slowest_branch():
    steps = [Step("a-compile", 4), Step("b-assets", 7), Step("c-package", 2, ("a-compile", "b-assets"))]
    assert build_schedule(steps)["c-package"] == Slot(7, 9)


def test_critical_path_of_a_chain():
    assert critical_path(CHAIN) == ["checkout", "build", "test"]


def test_independent_steps_all_start_at_the_beginning():
    steps = [
        Step("build", 3),
        Step("test", 5, ("build",)),
        Step("translations", 2),
        Step("upload", 1, ("test", "translations")),
    ]
    slots = build_schedule(steps)
    assert slots["translations"] == Slot(0, 2)
    assert slots["upload"] == Slot(8, 9)
    assert makespan(slots) == 9


def test_critical_path_ignores_short_side_branches():
    steps = [
        Step("fetch", 2),
        Step("unit", 4, ("fetch",)),
        Step("vendor", 5),
        Step("release", 1, ("unit", "vendor")),
    ]
    assert critical_path(steps) == ["fetch", "unit", "release"]
