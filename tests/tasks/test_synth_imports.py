"""The static import graph that picks the tests able to see a module's import-time state."""

from __future__ import annotations

from pdbgym.tasks.synth.baseline import Baseline
from pdbgym.tasks.synth.hotserver import narrowed
from pdbgym.tasks.synth.imports import ALL, ImportGraph

PROJECT = {
    "pkg/__init__.py": "from .rules import RULES\n",
    "pkg/rules.py": "from pkg import helpers\nRULES = helpers.build()\n",
    "pkg/helpers.py": "def build():\n    return [1]\n",
    "pkg/text.py": "def shout(s):\n    return s.upper()\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/deep.py": "from ..text import shout\n",
    "pkg/plugins.py": "import importlib\nMOD = importlib.import_module('pkg.' + 'text')\n",
    "tests/test_text.py": "from pkg.text import shout\n",
    "tests/test_deep.py": "def test_x():\n    from pkg.sub import deep\n",
    "tests/test_rules.py": "import pkg\n",
    "tests/test_plugins.py": "from pkg import plugins\n",
    "tests/test_helper_user.py": "from support import make\n",
    "tests/support.py": "from pkg.helpers import build\n",
    "other/conftest.py": "pytest_plugins = ['pkg.rules']\n",
    "other/test_other.py": "",
    "broken/test_broken.py": "def (:\n",
}
TESTS = sorted(p for p in PROJECT if p.rsplit("/", 1)[-1].startswith("test_"))


def test_observers_follow_imports_transitively_and_relatively() -> None:
    graph = ImportGraph(PROJECT)
    # rules.py is imported by the package __init__, which every ``pkg.x`` import runs.
    assert graph.observers("pkg/rules.py", TESTS) == TESTS
    # helpers.py: through the package (rules), and through a helper module on the tests' path.
    assert "tests/test_helper_user.py" in graph.observers("pkg/helpers.py", TESTS)
    # A relative import in a package below: test_deep (whose import sits in a function body) sees text.py.
    assert "tests/test_deep.py" in graph.observers("pkg/text.py", TESTS)


def test_a_module_nobody_imports_is_observed_only_by_dynamic_importers_and_unparsable_files() -> None:
    files = dict(PROJECT)
    files["pkg/lonely.py"] = "X = 1\n"
    graph = ImportGraph(files)
    assert graph.observers("pkg/lonely.py", TESTS) == ["broken/test_broken.py", "tests/test_plugins.py"]
    assert ALL in graph.closure("tests/test_plugins.py")


def test_conftest_plugins_and_the_test_file_itself_count() -> None:
    files = {k: v for k, v in PROJECT.items() if not k.startswith("pkg/__init__")}
    files["pkg/__init__.py"] = ""
    graph = ImportGraph(files)
    assert graph.observers("pkg/rules.py", TESTS) == ["broken/test_broken.py", "other/test_other.py",
                                                      "tests/test_plugins.py"]
    assert graph.observers("tests/test_text.py", TESTS) == ["broken/test_broken.py", "tests/test_plugins.py",
                                                            "tests/test_text.py"]
    # Without the package __init__ importing rules, text.py's importers do not see rules.py.
    assert "tests/test_text.py" not in graph.observers("pkg/rules.py", TESTS)


TABLES = """\
import re

WORDS = []
COUNT = 0


def _add(word):
    def cased(w):
        return w.upper()
    WORDS.append(cased(word))


def lookup(word):
    return word.upper() in WORDS


def size():
    return COUNT


_add("a")
_add("b")
"""


def _baseline(import_time: list[str], covering: dict[str, list[str]]) -> Baseline:
    passing = sorted({t for tests in covering.values() for t in tests} | {"t.py::test_other"})
    return Baseline("f", passing, [], [], {}, covering, import_time)


def test_a_re_executed_module_keeps_the_tests_that_read_what_changed() -> None:
    baseline = _baseline(["m.py:7", "m.py:8"], {"m.py:13": ["t.py::test_lookup"], "m.py:17": ["t.py::test_size"]})
    narrowing = baseline.narrowing("m.py:8", TABLES)  # the nested ``cased`` counts as part of ``_add``
    assert narrowing == {"base": [], "readers": {"COUNT": ["t.py::test_size"], "WORDS": ["t.py::test_lookup"],
                                                 "_add": []}, "everyone": []}
    everything = ["t.py::test_lookup", "t.py::test_other", "t.py::test_size"]
    assert narrowed(everything, narrowing, ["WORDS", "_add"]) == ["t.py::test_lookup"]
    assert narrowed(everything, narrowing, ["lookup"]) == everything, "a name not expected to change: no narrowing"
    assert baseline.narrowing("m.py:13", TABLES) is None, "not run at import: nothing to narrow"


def test_no_narrowing_for_dynamic_namespaces_or_readers_run_at_import_by_others() -> None:
    dynamic = TABLES + "\n\ndef fetch(name):\n    return globals()[name]\n"
    baseline = _baseline(["m.py:7"], {"m.py:13": ["t.py::test_lookup"]})
    assert baseline.narrowing("m.py:7", dynamic) is None
    early = _baseline(["m.py:7", "m.py:13"], {"m.py:13": ["t.py::test_lookup"]})  # lookup ran at import too
    narrowing = early.narrowing("m.py:7", TABLES)
    assert narrowing is not None and narrowing["everyone"] == ["WORDS"]
    assert narrowed(["t.py::test_lookup", "t.py::test_other"], narrowing, ["WORDS"]) == [
        "t.py::test_lookup", "t.py::test_other"]
