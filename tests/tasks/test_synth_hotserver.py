"""Mutants tried in a collected clean session (hot) behave exactly as when run from files.

A real project with the shapes that make swapping code tricky (a decorated function, methods, a
property, a static method, a closure, an lru_cache, functions run at import time, in a module that can
be re-executed and in ones that cannot, a module the tests import lazily), every mutant run both ways
in the real sandbox, and the outcomes compared.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pdbgym.tasks.synth.baseline import run_baseline
from pdbgym.tasks.synth.candidate import evaluate_candidate
from pdbgym.tasks.synth.engine import candidate_stream
from pdbgym.tasks.synth.hotserver import narrowed
from pdbgym.tasks.synth.operators import enumerate_sites
from pdbgym.tasks.synth.project import prepare_project
from pdbgym.tasks.synth.runner import hot_runner, stop_servers

pytestmark = pytest.mark.slow

LEDGER = textwrap.dedent('''\
    import functools


    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper


    @logged
    def balance(entries):
        total = 0
        for amount in entries:
            total += amount
        return total


    class Account:
        def __init__(self, owner, limit=100):
            self.owner = owner
            self.limit = limit
            self.entries = []

        def deposit(self, amount):
            if amount <= 0:
                raise ValueError("positive amounts only")
            self.entries.append(amount)
            return self.balance

        @property
        def balance(self):
            return balance(self.entries)

        @staticmethod
        def fee(amount):
            return amount // 100 if amount > 1000 else 0

        def can_withdraw(self, amount):
            return self.balance - amount >= -self.limit


    def make_scaler(factor):
        def scale(x):
            return x * factor
        return scale


    @functools.lru_cache(maxsize=None)
    def fib(n):
        if n < 2:
            return n
        return fib(n - 1) + fib(n - 2)


    def count_down(n):
        steps = 0
        while n > 0:
            n -= 1
            steps += 1
        return steps


    def _default_currency():
        codes = ["EUR", "USD"]
        return codes[0]


    DEFAULT = _default_currency()
''')

REPORT = textwrap.dedent('''\
    def summary(entries):
        if not entries:
            return "empty"
        return f"{len(entries)} entries"
''')

# Rules built at import by calling a function of the module, read back through the module: a mutant
# of ``_rule`` is tried hot by re-executing the module.
RATES = textwrap.dedent('''\
    import re

    RULES = []


    def _rule(code, rate):
        if not re.fullmatch(r"[A-Z]{3}", code):
            raise ValueError(code)
        RULES.append((code, rate))


    def convert(code, amount):
        for known, rate in RULES:
            if known == code:
                return round(amount * rate, 2)
        raise KeyError(code)


    _rule("EUR", 1.0)
    _rule("USD", 1.1)
    _rule("GBP", 0.85)
''')

# Built at import too, but the tests hold the clean list (``from ... import SCALE``): re-executing the
# module would not reach it, so ``_build`` goes from files.
UNITS = textwrap.dedent('''\
    def _build(n):
        scale = []
        for i in range(n):
            scale.append(i * 10)
        return scale


    SCALE = _build(4)
''')

# Built at import, and the test module derives its own state from it at import (``KNOWN``):
# re-executing ``codes`` would leave ``KNOWN`` clean, so a ``_name`` mutant that changes ``NAMES``
# goes from files.
CODES = textwrap.dedent('''\
    NAMES = {}


    def _name(code, label):
        NAMES[code] = label


    def label(code):
        return NAMES.get(code, "?")


    _name("EUR", "euro")
    _name("USD", "dollar")
''')

RATE_TESTS = textwrap.dedent('''\
    import pytest

    import ledger.codes as codes
    import ledger.rates as rates
    from ledger.units import SCALE

    KNOWN = sorted(codes.NAMES)


    def test_known_codes():
        assert KNOWN == ["EUR", "USD"]


    def test_label():
        assert codes.label("USD") == "dollar"


    def test_convert_eur():
        assert rates.convert("EUR", 10) == 10.0


    def test_convert_usd():
        assert rates.convert("USD", 10) == 11.0


    def test_convert_unknown():
        with pytest.raises(KeyError):
            rates.convert("JPY", 1)


    def test_scale():
        assert SCALE == [0, 10, 20, 30]
''')

TESTS = textwrap.dedent('''\
    import pytest

    from ledger import DEFAULT, Account, balance, count_down, fib, make_scaler


    def test_balance():
        assert balance([1, 2, 3]) == 6


    def test_deposit_and_balance():
        account = Account("ann")
        assert account.deposit(5) == 5
        assert account.deposit(7) == 12


    def test_deposit_refuses_zero():
        with pytest.raises(ValueError):
            Account("bob").deposit(0)


    def test_fee():
        assert Account.fee(5000) == 50
        assert Account.fee(1000) == 0


    def test_withdraw_limit():
        account = Account("cy", limit=10)
        assert account.can_withdraw(10)
        assert not account.can_withdraw(11)


    def test_scaler():
        assert make_scaler(3)(4) == 12


    def test_fib():
        assert [fib(n) for n in range(7)] == [0, 1, 1, 2, 3, 5, 8]


    def test_count_down():
        assert count_down(4) == 4


    def test_default():
        assert DEFAULT == "EUR"


    def test_report_loaded_late():
        from ledger.report import summary
        assert summary([]) == "empty"
        assert summary([1, 2]) == "2 entries"
''')


def write_ledger(root: Path) -> Path:
    project = root / "ledger-project"
    (project / "ledger").mkdir(parents=True)
    (project / "ledger" / "__init__.py").write_text(LEDGER)
    (project / "ledger" / "report.py").write_text(REPORT)
    (project / "tests").mkdir()
    (project / "tests" / "test_ledger.py").write_text(TESTS)
    (project / "ledger" / "rates.py").write_text(RATES)
    (project / "ledger" / "units.py").write_text(UNITS)
    (project / "ledger" / "codes.py").write_text(CODES)
    (project / "tests" / "test_rates.py").write_text(RATE_TESTS)
    # Warnings are errors, as in many real projects (toolz): a plugin loaded in a way pytest warns
    # about would break every hot session and send each mutant to files.
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    return project


def test_hot_and_file_runs_agree_on_every_mutant(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    project = prepare_project(str(write_ledger(tmp_path)), workdir)
    baseline = run_baseline(project, workdir, runs=1, per_test_timeout_s=3.0)
    assert len(baseline.passing) == 16
    (workdir / "scratch").mkdir()
    seen: dict[str, set[str]] = {"hot": set(), "files": set()}
    compared, narrower = 0, set()
    try:
        for site in candidate_stream(project, seed=0, operators=None):
            key = f"{site.file}:{site.function_line}"
            tests = baseline.tests_reaching(key)
            if not tests:
                continue
            timeouts = baseline.hang_timeouts(tests, 3.0)
            narrowing = baseline.narrowing(key, (project.root / site.file).read_text())
            args = (str(project.root), str(workdir / "scratch"), site, tests, baseline.passing, 3.0, str(workdir))
            hot = evaluate_candidate(*args, hot_import_time=baseline.import_time, timeouts=timeouts,
                                     narrowing=narrowing)
            cold = evaluate_candidate(*args, timeouts=timeouts)
            assert cold.executor == "files"
            # A re-executed module's run leaves out the tests that cannot see what changed: the same
            # failing set proves those tests pass from files too.
            assert (hot.status, hot.failing) == (cold.status, cold.failing), (site, hot, cold)
            if hot.changed is not None and len(narrowed(tests, narrowing, hot.changed)) < len(tests):
                narrower.add(site.function)
            seen[hot.executor].add(site.function)
            compared += 1
    finally:
        stop_servers(below=workdir)
    assert compared >= 30
    assert narrower == {"_rule"}, "re-executed rates.py: only the tests that entered convert (reads RULES) run"
    # Every kind of function took the hot path (a decorator's wrapper too, though the decorator ran at
    # import; a function run at import in a module that can be re-executed), except the functions run at
    # import in modules that cannot be (classes, decorators; a value the tests hold), the module the
    # tests import late, and mutants that change the shape of a live closure (a wrapper that stops
    # using ``fn``), a ``_rule`` mutant whose module raises when re-executed, and ``_name`` mutants that
    # change what the test module derived from ``NAMES`` at import.
    assert {"balance", "Account.deposit", "Account.can_withdraw", "Account.fee", "logged.wrapper",
            "make_scaler.scale", "fib", "count_down", "_rule", "convert"} <= seen["hot"], seen
    assert {"_default_currency", "logged", "summary", "_build", "_name"} <= seen["files"] <= {
        "_default_currency", "logged", "summary", "logged.wrapper", "_build", "_rule", "_name"}, seen


def test_a_mutant_that_hangs_is_stopped_at_its_hang_limit_not_the_cap(tmp_path: Path) -> None:
    """The cap is set far past the test's own timeout: a runner that ignored the per-test hang limits
    (about a second here) would hang the test instead of reporting the mutant as timed out."""
    cap_s = 3600.0
    workdir = tmp_path / "work"
    project = prepare_project(str(write_ledger(tmp_path)), workdir)
    baseline = run_baseline(project, workdir, runs=1, per_test_timeout_s=20.0)
    source = (project.root / "ledger/__init__.py").read_text()
    line = source.splitlines().index("        n -= 1") + 1
    site = next(s for s in enumerate_sites(source, "ledger/__init__.py", ["removed_assignment"]) if s.line == line)
    tests = baseline.tests_reaching(f"{site.file}:{site.function_line}")
    limits = baseline.hang_timeouts(tests, cap_s)
    assert limits and all(limit < 20.0 for limit in limits.values()), limits
    (workdir / "scratch").mkdir()
    try:
        hot_runner(project.root, workdir, cap_s, baseline.import_time)
        result = evaluate_candidate(str(project.root), str(workdir / "scratch"), site, tests, baseline.passing, cap_s,
                                    str(workdir), hot_import_time=baseline.import_time, timeouts=limits)
    finally:
        stop_servers(below=workdir)
    assert result.status == "timeout" and result.executor == "hot", result
