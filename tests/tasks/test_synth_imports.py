"""The static import graph that picks the tests able to see a module's import-time state."""

from __future__ import annotations

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
