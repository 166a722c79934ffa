"""Judge the stream of result records of one test run: per-test outcomes, and any sign of forgery.

Records (from ``pdbgym.grading.plugin``): ``start``, then one ``phase`` per reported test phase
(``nodeid``, ``when`` in setup/call/teardown, ``outcome`` in passed/failed/skipped) and one ``collect``
per collection error (``nodeid`` of the module that failed to import: its tests get no phase and count
as failed) and one ``subtest`` per subtest report (``nodeid``, ``outcome``: pytest's ``subtests`` fixture
and ``unittest``'s ``subTest`` report each subtest as one more ``call`` of its test), then one ``end``
(``exitstatus``, ``phases``, ``collect_errors``, ``subtests``, ``selfcheck``), each with ``seq`` counting
from 0. A test is passed only when its setup, call and teardown all passed and none of its subtests
failed, and the stream ends with the end record (a run cut short passes nothing: its "passed" phase
records were never checked); a passed subtest never makes a test pass, so a forged one gains nothing. Signs of forgery (each
makes the run tampered): a sequence number out of order, a record that is not JSON, a second record for
a test phase, a record for a test not asked for, anything after the end record, a second end record, an
end record whose phase or subtest count disagrees with the stream, a process exit status other than
the end record's, an exit status that disagrees with the outcomes, a clean exit (0) with no end record,
a failed self-check, pytest's own closing line (written by its terminal reporter, not by the plugin)
disagreeing with the records, or a record naming another pipe than the host's.

An abnormal ending passes nothing, forged or not (``Verdict.refused`` says why): a run killed by a signal
or by the wall clock, one whose exit status is unknown, a stream without its end record, or output
without pytest's closing line. Code that forges a whole stream and then ends the process its own way
(a kill, ``os._exit``) gains nothing from it, and no decision is taken from other text the run prints.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

_WHENS = ("setup", "call", "teardown")
_OUTCOMES = ("passed", "failed", "skipped")
# pytest's exit statuses: 0 all passed, 1 some failed, 2 interrupted, 3 internal error, 4 usage error,
# 5 nothing collected.
_OK, _TESTS_FAILED = 0, 1
_PYTEST_STATUSES = range(6)
# pytest's closing line; a count may name two words ("4 subtests passed").
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours a project's addopts may turn on (--color=yes)
_SUMMARY = re.compile(r"^((?:\d+ [a-z]+(?: [a-z]+)?)(?:, \d+ [a-z]+(?: [a-z]+)?)*) in [\d.]+s(?: \([\d:]+\))?$")


class Verdict(NamedTuple):
    """What a run's stream and ending say. ``outcomes``: node id -> passed/failed/error/skipped/incomplete
    (or ``refused``: reported passed in a run whose ending passes nothing); ``tampered``: signs of forgery;
    ``refused``: why the run's ending passes nothing (empty for a normal ending); ``foreign``: the project's
    modules the run imported from outside the repo (a released copy installed beside it), by name."""

    outcomes: dict[str, str]
    tampered: list[str]
    refused: list[str]
    foreign: dict[str, str] = {}  # project modules the run imported from outside the repo: name -> file


def decode_records(stream: bytes) -> tuple[list[dict], list[str]]:
    """The JSON records of the channel, and what in it was not a well-formed record."""
    records, problems = [], []
    for line in stream.split(b"\n"):
        if not line:
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            problems.append(f"a record that is not JSON: {line[:80]!r}")
            continue
        if not isinstance(record, dict):
            problems.append(f"a record that is not an object: {line[:80]!r}")
            continue
        records.append(record)
    return records, problems


def outcome_of(phases: dict[str, str]) -> str:
    """One test's outcome from its phases' outcomes."""
    if phases.get("call") == "failed":
        return "failed"
    if "failed" in phases.values():
        return "error"
    if "skipped" in phases.values():
        return "skipped"
    if all(phases.get(w) == "passed" for w in _WHENS):
        return "passed"
    return "incomplete"


def summary_counts(output: str) -> dict[str, int] | None:
    """The counts of pytest's own closing line ("1 failed, 4 passed in 0.13s"), when it is the output's last
    line; None when it is not there (a crash, a cut run, output after pytest finished)."""
    lines = [_ANSI.sub("", line) for line in output.splitlines() if line.strip()]
    match = _SUMMARY.match(lines[-1].strip("= ")) if lines else None
    if match is None:
        return None
    counts = {}
    for part in match.group(1).split(", "):
        number, _, word = part.partition(" ")
        counts[word.rstrip("s") if word in ("errors", "warnings") else word] = int(number)
    return counts


def _check_summary(outcomes: dict[str, str], collect_errors: int, output: str,
                   calls_passed: int | None) -> list[str]:
    """pytest's terminal summary is written by other code than the records; the two must agree: its
    ``passed`` exactly (one per call phase that passed and was not an expected failure; ``calls_passed``
    None: not compared, as in runs with subtests, whose failures move a test out of pytest's count), and
    whether anything failed or errored (a collection error is one error in the summary)."""
    counts = summary_counts(output)
    if counts is None:
        return []
    problems = []
    if calls_passed is not None and counts.get("passed", 0) != calls_passed:
        problems.append(f"pytest's own summary says {counts.get('passed', 0)} passed, the records say {calls_passed}")
    said = counts.get("failed", 0) + counts.get("error", 0)
    recorded = sum(o in ("failed", "error") for o in outcomes.values()) + collect_errors
    if said and not recorded:
        problems.append(f"pytest's own summary says {said} failed or errored, the records say none did")
    if recorded and not said:
        problems.append(f"the records say {recorded} test(s) failed, pytest's own summary says none did")
    return problems


def judge(stream: bytes, nodes: list[str], returncode: int | None, timed_out: bool,
          output: str = "", pipe: int | None = None, key: str | None = None) -> Verdict:
    """The verdict on a run asked to run ``nodes`` that exited with ``returncode`` (negative: killed by that
    signal; None: unknown) and printed ``output`` (pytest's closing line must end it and agree with the
    records). ``pipe``: the inode of the host's channel pipe, which the start and end records must name;
    ``key``: the run's secret, which every record must carry (one that does not was not written by the
    report plugin, which alone was given it)."""
    records, tampered = decode_records(stream)
    if key is not None:
        foreign = [r for r in records if r.get("key") != key]
        if foreign:
            tampered.append(f"{len(foreign)} record(s) without the run's key, not written by the report plugin "
                            f"(the first: {str({k: v for k, v in foreign[0].items() if k != 'key'})[:120]})")
    wanted = set(nodes)
    phases: dict[str, dict[str, str]] = {}
    end: dict | None = None
    phase_count = collect_errors = subtest_count = calls_passed = 0
    failed_subtests: set[str] = set()
    for expected_seq, record in enumerate(records):
        kind = record.get("kind")
        if record.get("seq") != expected_seq:
            tampered.append(f"record {expected_seq} carries sequence number {record.get('seq')!r}")
        if end is not None:
            tampered.append(f"a {kind!r} record came after the end record")
            continue
        if kind == "start":
            if expected_seq != 0:
                tampered.append("a second start record")
        elif kind == "phase":
            phase_count += 1
            calls_passed += record.get("when") == "call" and record.get("outcome") == "passed" \
                and not record.get("xfail")
            _take_phase(record, wanted, phases, tampered)
        elif kind == "subtest":
            subtest_count += 1
            _take_subtest(record, wanted, failed_subtests, tampered)
        elif kind == "collect":
            collect_errors += 1
            if not isinstance(record.get("nodeid"), str) or record.get("outcome") != "failed":
                tampered.append(f"a malformed collect record: {str(record)[:120]}")
        elif kind == "end":
            end = record
        else:
            tampered.append(f"a record of unknown kind {kind!r}")
    if records and records[0].get("kind") != "start":
        tampered.append("the stream does not begin with the start record")
    outcomes = {nodeid: outcome_of(p) for nodeid, p in phases.items()}
    for nodeid in failed_subtests:  # pytest's own call report of such a test may still say passed
        if outcomes.get(nodeid) != "error":
            outcomes[nodeid] = "failed"
    if end is not None and end.get("subtests", 0) != subtest_count:
        tampered.append(f"the end record counts {end.get('subtests')!r} subtest records, the stream holds "
                        f"{subtest_count}")
    tampered += _check_end(end, phase_count, collect_errors, outcomes, returncode, timed_out)
    tampered += _check_pipe(records[0] if records else None, end, pipe)
    if end is None:
        # No end record: the session never reached the checks that travel in it (the self-check, the
        # hooks, the pristine code), so a phase record's "passed" is unchecked; a run cut short (a crash,
        # a kill, the wall clock, or code that ends the process to skip those checks) passes nothing.
        outcomes = {nodeid: "incomplete" if o == "passed" else o for nodeid, o in outcomes.items()}
    if end is not None:
        tampered += _check_summary(outcomes, collect_errors, output, None if subtest_count else calls_passed)
    refused = abnormal_ending(returncode, timed_out, end is not None, output)
    if refused:
        outcomes = {nodeid: "refused" if o == "passed" else o for nodeid, o in outcomes.items()}
    foreign = end.get("foreign") if end is not None and isinstance(end.get("foreign"), dict) else {}
    return Verdict(outcomes, tampered, refused, {str(k): str(v) for k, v in foreign.items()})


def abnormal_ending(returncode: int | None, timed_out: bool, has_end: bool, output: str) -> list[str]:
    """Why a run's ending passes nothing: only a process that exited by itself, in time, after the plugin's
    end record and with pytest's own closing line last, can pass a test. Every one of these is also how
    code that forged a stream would end the run early, so none is taken on trust."""
    reasons = []
    if timed_out:
        reasons.append("the run hit its wall-clock limit")
    elif returncode is None:
        reasons.append("the run's exit status is unknown")
    elif returncode < 0:
        reasons.append(f"the test process was killed by signal {-returncode}")
    elif returncode > 128:  # bubblewrap's report of a child ended by a signal: 128 + its number
        reasons.append(f"the test process was killed by signal {returncode - 128} (exit status {returncode})")
    elif returncode not in _PYTEST_STATUSES:
        reasons.append(f"the process exited {returncode}, a status pytest never uses")
    if not has_end:
        reasons.append("the result stream has no end record (the session was cut short)")
    elif summary_counts(output) is None:
        reasons.append("pytest's own closing line is not the last line of the output")
    return reasons


def _check_pipe(start: dict | None, end: dict | None, pipe: int | None) -> list[str]:
    """The plugin names the pipe it writes to (its inode) when it opens it and again at the end: a record
    stream that reached the host through another pipe, or a plugin whose descriptor was replaced by
    another file, disagrees with the host's own pipe."""
    if pipe is None:
        return []
    problems = []
    for name, record in (("start", start), ("end", end)):
        if record is not None and record.get("kind") == name and record.get("pipe") != pipe:
            problems.append(f"the {name} record names pipe {record.get('pipe')!r}, not the host's channel")
    return problems


def _take_subtest(record: dict, wanted: set[str], failed: set[str], tampered: list[str]) -> None:
    """A subtest's report: any number per test. A failed one fails its test; a passed or skipped one
    changes nothing, so no subtest record can make a test pass."""
    nodeid, outcome = record.get("nodeid"), record.get("outcome")
    if not isinstance(nodeid, str) or outcome not in _OUTCOMES:
        tampered.append(f"a malformed subtest record: {str(record)[:120]}")
    elif nodeid not in wanted:
        tampered.append(f"a record for {nodeid}, a test that was not asked for")
    elif outcome == "failed":
        failed.add(nodeid)


def _take_phase(record: dict, wanted: set[str], phases: dict[str, dict[str, str]], tampered: list[str]) -> None:
    nodeid, when, outcome = record.get("nodeid"), record.get("when"), record.get("outcome")
    if not isinstance(nodeid, str) or when not in _WHENS or outcome not in _OUTCOMES:
        tampered.append(f"a malformed phase record: {str(record)[:120]}")
        return
    if nodeid not in wanted:
        tampered.append(f"a record for {nodeid}, a test that was not asked for")
        return
    seen = phases.setdefault(nodeid, {})
    if when in seen:
        tampered.append(f"a second report for {nodeid} ({when}): the first one counts")
        return
    seen[when] = outcome


def _check_end(end: dict | None, phase_count: int, collect_errors: int, outcomes: dict[str, str],
               returncode: int | None, timed_out: bool) -> list[str]:
    if end is None:
        if returncode == 0 and not timed_out:
            return ["pytest exited 0 without its end record (the session was cut short)"]
        return []  # killed, crashed or a usage error: missing outcomes count as failed, nothing forged
    problems = [f"the plugin's self-check: {p}" for p in end.get("selfcheck") or []]
    if not isinstance(end.get("selfcheck"), list):
        problems.append("the end record has no self-check")
    status = end.get("exitstatus")
    if end.get("phases") != phase_count:
        problems.append(f"the end record counts {end.get('phases')!r} phase records, the stream holds {phase_count}")
    if end.get("collect_errors", 0) != collect_errors:
        problems.append(f"the end record counts {end.get('collect_errors')!r} collection errors, the stream holds "
                        f"{collect_errors}")
    if collect_errors and (phase_count or status == _OK):
        # pytest stops after a collection error (interrupted, status 2) before any test runs: a collect
        # record beside test phases or a clean exit is one written to explain a failure away.
        problems.append(f"{collect_errors} collection error(s) recorded, yet {phase_count} test phase(s) ran "
                        f"and the session ended with status {status!r}")
    if not timed_out and returncode is not None and returncode >= 0 and returncode != status:
        problems.append(f"pytest's session ended with status {status!r} but the process exited {returncode}")
    failed = [n for n, o in outcomes.items() if o in ("failed", "error")]
    if status == _OK and failed:
        problems.append(f"exit status 0 although {failed[0]} failed")
    if status == _TESTS_FAILED and not failed and not collect_errors:
        problems.append("exit status 1 (tests failed) although no failure was reported")
    return problems
