"""A tiny real task folder for tests: a calculator whose sub() adds."""

import json
from pathlib import Path

PATCH = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,6 +1,6 @@
 def add(a, b):
     return a + b
 
 
 def sub(a, b):
-    return a + b
+    return a - b
"""


def make_task(root: Path, **overrides) -> Path:
    repo = root / "repo"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_ops.py").write_text(
        "from calc.ops import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n"
    )
    data = {
        "instance_id": "demo__sub",
        "FAIL_TO_PASS": ["tests/test_ops.py::test_sub"],
        "PASS_TO_PASS": ["tests/test_ops.py::test_add"],
        "patch": PATCH,
    }
    data.update(overrides)
    (root / "task.json").write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return root
