"""The grading run's in-process guard: an audit hook that refuses interpreter machinery used by the
agent's code, and the pristine code every collected test must run.

Loaded by the report plugin (``pdbgym.grading.plugin``) before any project module is imported.
Nothing here is a boundary by itself (code in the same process can always reach further); each piece
closes a road a forgery took, and the host judges what they report (threat model: docs/sandbox.md).

- **Audit hook** (``install_audit_hook``, PEP 578; a hook cannot be removed once added). Only where the
  run knows which lines the agent wrote (``PDBGYM_AGENT_LINES``, set by grading and by the agent's own
  ``run_tests``). Events that honest code under test does not need — trace and profile hooks, ``gc``
  walks of the heap, new code or function objects, setting a function's ``__code__``, patching a class
  of pytest, pluggy or pdbgym, new audit hooks, importing the runner's own modules — are refused
  (``RuntimeError``) and reported when the innermost frame that is not library code (the standard
  library, installed packages, pdbgym) belongs to the agent: a file it changed, code compiled from a
  string, or a file outside the project. Frame access (``sys._getframe``, ``tb_frame``, ``gi_frame``...)
  is refused when the agent's code asks for a frame itself, or through ``inspect`` or ``traceback``.
- **Pristine code** (``PristineCode``): every test file and conftest is compiled here, plainly and as
  pytest's assertion rewriter compiles it, and a collected test (or a hook implementation) whose code
  claims one of those files must equal the code object found there at the same line under the same
  name. A module swapped in ``sys.modules``, emptied bodies, or a ``__code__`` that claims the test file
  all fail this comparison whatever name, path or line they carry.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module runs in the sandbox, before pytest's internals load
    from _pytest.config import Config

AGENT_LINES_ENV = "PDBGYM_AGENT_LINES"
# Refused outright when the agent's code is responsible (see ``_responsible``).
_MACHINERY_EVENTS = frozenset({
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "code.__new__", "function.__new__", "sys.monitoring.register_callback",
    "sys.monitoring.set_events", "sys.monitoring.use_tool_id", "cpython.PyInterpreterState_Clear",
})
# Refused when the agent's code takes the frame itself (or through inspect/traceback): logging and other
# libraries take frames on an agent's behalf all the time, and that is honest.
_FRAME_EVENTS = frozenset({"sys._getframe", "sys._getframemodulename", "sys._current_frames"})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "gi_code", "cr_code"})
# Library functions that hand the frame they take to their caller: (file ending, function names).
_FRAME_HANDING = (("/inspect.py", frozenset({"currentframe", "stack", "trace", "getinnerframes", "getouterframes"})),
                  ("/traceback.py", frozenset({"walk_stack", "walk_tb"})),
                  ("/logging/__init__.py", frozenset({"<lambda>"})),  # logging.currentframe
                  ("/bdb.py", None))
# Paths of the process's own state (descriptors, memory, environment, command line): the run's secret key
# and its result channel are there, so the agent's code may not open, list or enter them.
_OWN_STATE = re.compile(r"^/(?:proc/+(?:self|thread-self|\d+)|dev/+fd)(?:/|$)")
_PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.chdir"})
_RUNNER_PACKAGES = frozenset({"_pytest", "pytest", "pluggy", "pytest_timeout", "pdbgym"})
_IMPORT_REFUSED = _RUNNER_PACKAGES | {"ctypes", "_ctypes"}  # not gc: gc.collect() is honest, its walks are audited


AgentLines = dict[str, tuple[tuple[int, int], ...]]


def agent_lines_from_env() -> AgentLines | None:
    """The lines the agent wrote, as the host passed them: a JSON object mapping each repo-relative file
    to its ``[first, last]`` spans (JSON, so no file name, whatever characters it holds, can end one
    entry and start another); None when the run has no agent code (task validation, synthesis). A value
    that is not such an object is refused: a run whose guard would not know the agent's code must not
    run."""
    raw = os.environ.pop(AGENT_LINES_ENV, None)
    if raw is None:
        return None
    decoded = json.loads(raw)
    if not isinstance(decoded, dict):
        raise ValueError(f"{AGENT_LINES_ENV} is not a JSON object")
    lines: AgentLines = {}
    for rel, spans in decoded.items():
        if not isinstance(spans, list) or not all(
                isinstance(span, list) and len(span) == 2 and all(type(n) is int for n in span) for span in spans):
            raise ValueError(f"{AGENT_LINES_ENV}: the spans of {rel!r} are not [first, last] pairs")
        lines[rel] = tuple((a, b) for a, b in spans)
    return lines


def encode_agent_lines(lines: AgentLines) -> str:
    """The variable's text for ``lines`` (see ``agent_lines_from_env``)."""
    return json.dumps({rel: [list(span) for span in spans] for rel, spans in sorted(lines.items())},
                      ensure_ascii=True, separators=(",", ":"))


def library_dirs(root: str) -> tuple[str, ...]:
    """Folders of code that is not the project's: everything on ``sys.path`` before the project is added
    (the standard library, installed packages) and pdbgym's own package."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = {os.path.abspath(p) for p in sys.path if p and os.path.abspath(p) != root}
    dirs.add(here)
    return tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))


class AgentCode:
    """Says whether code at a file and line is the agent's: a line it wrote (``agent_lines``), code
    compiled from a string (``<string>``; frozen standard modules excepted), a project file created or
    written since this run started (its ctime, which no process can set back, differs from the one seen
    before any project code ran), or a file neither in the project nor a library. Lines are what count,
    not files: a fix in a file whose original code takes frames (a logging helper, a decorator) leaves
    that original code the project's."""

    def __init__(self, root: str, agent_lines: AgentLines, libraries: tuple[str, ...]) -> None:
        self.root_prefix = root.rstrip(os.sep) + os.sep
        self.agent_lines = agent_lines
        self.libraries = libraries
        self.stat = os.stat
        self.ctimes = self._ctimes(root)

    @staticmethod
    def _ctimes(root: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for folder, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".git", ".sandbox_home")]
            for name in filenames:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    try:
                        found[path] = os.stat(path, follow_symlinks=False).st_ctime_ns
                    except OSError:
                        pass
        return found

    def is_library(self, filename: str) -> bool:
        return filename.startswith("<frozen ") or (
            filename.startswith(self.libraries) and not filename.startswith(self.root_prefix))

    def is_agent(self, filename: str, lineno: int | None = None) -> bool:
        """Whether the code at ``filename:lineno`` is the agent's (any line of the file: ``lineno`` None)."""
        if filename.startswith("<"):
            # Frozen standard modules and doctest examples (compiled from the pristine docstrings) are
            # not the agent's; any other code compiled from a string is.
            return not filename.startswith(("<frozen ", "<doctest "))
        if not filename.startswith(self.root_prefix):
            return not filename.startswith(self.libraries)
        spans = self.agent_lines.get(filename[len(self.root_prefix):])
        if spans is not None and (lineno is None or any(a <= lineno <= b for a, b in spans)):
            return True
        try:
            now = self.stat(filename, follow_symlinks=False).st_ctime_ns
        except OSError:
            return True  # gone since it ran: nothing the task's repo holds
        return self.ctimes.get(filename) != now

    def code_is_agent(self, code: types.CodeType) -> bool:
        """Whether any line of ``code`` is the agent's."""
        lines = {line for _, _, line in code.co_lines() if line is not None} or {code.co_firstlineno}
        return any(self.is_agent(code.co_filename, line) for line in sorted(lines))


def install_audit_hook(agent: AgentCode) -> Callable[[], list[str]]:
    """Add the audit hook; return a function giving what it refused so far (at most 50 entries)."""
    findings: list[str] = []
    busy = [False]
    getframe, str_, len_, isinstance_, type_ = sys._getframe, str, len, isinstance, type
    current_thread, main_thread = threading.current_thread, threading.main_thread
    machinery, frame_events, frame_attributes = _MACHINERY_EVENTS, _FRAME_EVENTS, _FRAME_ATTRIBUTES
    runner_packages, import_refused, frame_handing = _RUNNER_PACKAGES, _IMPORT_REFUSED, _FRAME_HANDING
    path_events, own_state = _PATH_EVENTS, _OWN_STATE.match
    normpath, join, getcwd = os.path.normpath, os.path.join, os.getcwd
    is_agent, is_library = agent.is_agent, agent.is_library

    def agent_frame(frame: types.FrameType) -> bool:
        return is_agent(frame.f_code.co_filename, frame.f_lineno)

    def where(frame: types.FrameType) -> str:
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"

    def responsible() -> types.FrameType | None:
        """The innermost frame below the audited operation that is not library code (None: only
        library code is running, as on a thread the agent's code started through a library)."""
        frame = getframe(3)  # 0 here, 1 the check, 2 the hook, 3 the code that raised the event
        while frame is not None and is_library(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def hands_frames(frame: types.FrameType) -> bool:
        filename, name = frame.f_code.co_filename, frame.f_code.co_name
        return any(filename.endswith(end) and (names is None or name in names) for end, names in frame_handing)

    def asks_for_frame() -> types.FrameType | None:
        """The agent's frame that asked for a frame, itself or through library functions that hand
        theirs over (``inspect.stack``, ``traceback.walk_stack``, ``logging.currentframe``); None
        when a library took the frame for its own use (logging's caller lookup, a traceback's text)."""
        frame = getframe(3)
        for _ in range(4):
            if frame is None or not hands_frames(frame):
                break
            frame = frame.f_back
        return frame if frame is not None and agent_frame(frame) else None

    own = os.path.dirname(os.path.abspath(__file__)) + os.sep

    def check(event: str, args: tuple) -> str | None:
        caller = getframe(2)
        if caller is not None and caller.f_code.co_filename.startswith(own):
            return None  # the report plugin's own watch of each test's entry
        if event in machinery or (event == "object.__setattr__" and (
                args[1] == "__code__" or (isinstance_(args[0], type_) and str_(
                    getattr(args[0], "__module__", "")).partition(".")[0] in runner_packages))):
            frame = responsible()
            # Library code alone on the main thread is pytest, doctest (which clears and restores the trace
            # hook around each example) and the like; alone on another thread it may be running a hook the
            # agent's code handed over (``threading.settrace``), so it is not trusted there.
            if (frame is None and current_thread() is not main_thread()) or (frame is not None and agent_frame(frame)):
                what = event if event != "object.__setattr__" else f"setting {args[1]} on {args[0]!r:.60}"
                return f"{what} from {where(frame) if frame is not None else 'a thread of library code only'}"
        elif event in frame_events or (event == "object.__getattr__" and args[1] in frame_attributes):
            frame = asks_for_frame()
            if frame is not None:
                return f"frame access ({event} {args[1] if len_(args) > 1 else ''}) from {where(frame)}".replace(" )", ")")
        elif event in path_events:
            path = args[0] if args else None
            if isinstance_(path, bytes):
                path = path.decode("utf-8", "replace")
            # every import opens files: an absolute path is checked as it is, only a relative one needs the cwd
            if isinstance_(path, str_) and own_state(normpath(path if path[:1] == "/" else join(getcwd(), path))):
                frame = responsible()
                if frame is not None and agent_frame(frame):
                    return f"{event} of {path!r:.80} (the process's own state) from {where(frame)}"
        elif event == "import" and str_(args[0]).partition(".")[0] in import_refused:
            frame = getframe(2)
            if frame is not None and agent_frame(frame):
                return f"import of {args[0]} from {where(frame)}"
        return None

    def hook(event: str, args: tuple) -> None:
        if busy[0] or not (event in machinery or event in frame_events or event == "import" or event in path_events
                           or event == "object.__setattr__" or event == "object.__getattr__"):
            return
        busy[0] = True
        try:
            problem = check(event, args)
        finally:
            busy[0] = False
        if problem is not None:
            if len_(findings) < 50:
                findings.append(f"interpreter machinery used by the agent's code: {problem}")
            raise RuntimeError(f"refused in pdbgym's grading run: {problem}")

    sys.addaudithook(hook)
    return lambda: list(findings)


_FUNCTION_CODE = vars(types.FunctionType)["__code__"]
_FUNCTION_DICT = vars(types.FunctionType)["__dict__"]
_METHOD_FUNC = vars(types.MethodType)["__func__"]
_PARTIAL_FUNC = vars(functools.partial)["func"]
_TYPE_MRO, _TYPE_DICT = vars(type)["__mro__"], vars(type)["__dict__"]


def callable_codes(function: object, limit: int = 16) -> list[types.CodeType]:
    """Every code object ``function`` runs through the wrappers Python and functools make: a bound method's
    ``__func__``, a ``functools.partial``'s ``func``, a function's ``__wrapped__``, the ``__call__`` the
    object's class defines. Read through the base types' own descriptors, by the object's real type (not
    ``__class__``), never through ``getattr``, which runs whatever ``__getattr__`` or property a class
    defines. Empty: nothing reachable holds code (a builtin, or an object that hides what it calls)."""
    found: list[types.CodeType] = []
    pending, seen = [function], set()
    while pending and len(seen) < limit:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        kind = type(item)
        if kind is types.FunctionType:
            found.append(_FUNCTION_CODE.__get__(item))
            inner = _FUNCTION_DICT.__get__(item).get("__wrapped__")
            if inner is not None:
                pending.append(inner)
        elif kind is types.MethodType:
            pending.append(_METHOD_FUNC.__get__(item))
        elif issubclass(kind, functools.partial):
            pending.append(_PARTIAL_FUNC.__get__(item))
        elif kind in (staticmethod, classmethod):
            pending.append(item.__func__)  # type: ignore[attr-defined]
        elif kind not in (types.BuiltinFunctionType, types.BuiltinMethodType) and not issubclass(kind, type):
            for owner in _TYPE_MRO.__get__(kind):
                call = _TYPE_DICT.__get__(owner).get("__call__")
                if call is not None:
                    if owner is not object:
                        pending.append(call)
                    break
    return found


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


class PristineCode:
    """The code objects of the project's test files and conftest files, compiled from their (read-only)
    sources on demand, plainly and as pytest's assertion rewriter compiles them."""

    def __init__(self, root: str, is_protected: Callable[[str], bool],
                 rewrite: Callable[[Path, Config | None], tuple[object, types.CodeType]] | None) -> None:
        self.root_prefix = root.rstrip(os.sep) + os.sep
        self.is_protected = is_protected
        self.rewrite = rewrite
        self.compile, self.open = compile, open
        self.by_file: dict[str, dict[tuple[int, str], list[types.CodeType]]] = {}

    def covers(self, filename: str) -> bool:
        """True for a test file or conftest of the project (code claiming such a file is checked)."""
        return filename.startswith(self.root_prefix) and filename.endswith(".py") \
            and self.is_protected(filename[len(self.root_prefix):])

    def _index(self, filename: str, config: Config | None) -> dict[tuple[int, str], list[types.CodeType]]:
        if filename in self.by_file:
            return self.by_file[filename]
        index: dict[tuple[int, str], list[types.CodeType]] = {}
        modules = []
        try:
            with self.open(filename, "rb") as handle:
                source = handle.read()
            modules.append(self.compile(source, filename, "exec", dont_inherit=True))
            if self.rewrite is not None:
                modules.append(self.rewrite(Path(filename), config)[1])
        except (OSError, SyntaxError, ValueError):
            pass
        for module in modules:
            for code in _code_objects(module):
                index.setdefault((code.co_firstlineno, code.co_name), []).append(code)
        self.by_file[filename] = index
        return index

    def mismatch(self, code: types.CodeType, config: Config | None) -> str | None:
        """Why ``code`` is not the pristine code it claims to be (None: it is, or it claims no test file)."""
        if not self.covers(code.co_filename):
            return None
        found = self._index(code.co_filename, config).get((code.co_firstlineno, code.co_name), [])
        if any(code == pristine for pristine in found):
            return None
        where = f"{code.co_filename[len(self.root_prefix):]}:{code.co_firstlineno} ({code.co_name})"
        if not found:
            return f"code claiming {where} matches no code of that pristine file"
        return f"code claiming {where} differs from the pristine file's"


class _Unrelated:
    """A value no honest ``__eq__`` of another class calls equal: every attribute it is asked for is a
    fresh object, so an ``__eq__`` comparing fields (``getattr(other, "name", None)``) answers False."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        return object()


def _code_of(value: object) -> types.CodeType | None:
    """The code behind a function, method, ``partialmethod``/``partial`` or wrapper (None: builtin)."""
    for _ in range(4):
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType):
            return code
        value = getattr(value, "__func__", None) or getattr(value, "func", None) or getattr(value, "__wrapped__", None)
        if value is None:
            return None
    return None


def _bare_instance(cls: type) -> object:
    """An instance of ``cls`` made without ``__init__``: ``object.__new__``, or the ``__new__`` of the
    builtin it derives from (a ``tuple`` or ``str`` subclass)."""
    try:
        return object.__new__(cls)
    except TypeError:
        for base in cls.__mro__[1:]:
            if base.__module__ == "builtins" and base is not object:
                return base.__new__(cls)  # type: ignore[call-overload]
        raise


def _agent_class(cls: type, agent: AgentCode) -> bool:
    for value in list(vars(cls).values()):
        code = _code_of(value)
        if code is not None and agent.code_is_agent(code):
            return True
    return False


def always_equal_classes(agent: AgentCode) -> list[str]:
    """Classes alive at the end of the run that the agent wrote (a method's code on its lines) whose
    ``__eq__`` calls a bare instance equal to an unrelated object (or whose ``__ne__`` calls it not
    unequal): values that pass any ``assert result == expected`` without computing anything. Each probe
    is one comparison of an instance made without ``__init__``; an exception or ``NotImplemented`` is an
    honest answer."""
    found: list[str] = []
    seen: set[int] = set()
    stack = list(object.__subclasses__())
    while stack and len(found) < 20:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        try:
            stack.extend(type.__subclasses__(cls))
        except TypeError:
            pass
        names = [n for n in ("__eq__", "__ne__") if n in vars(cls)]
        if not names or not _agent_class(cls, agent):
            continue
        for name, wanted in (("__eq__", True), ("__ne__", False)):
            if name not in names:
                continue
            try:
                answer = getattr(_bare_instance(cls), name)(_Unrelated())
            except Exception:  # noqa: BLE001 - the agent's code may raise anything; that is honest
                continue
            if answer is not NotImplemented and bool(answer) is wanted:
                code = _code_of(vars(cls)[name])
                where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
                found.append(f"{cls.__module__}.{cls.__qualname__}.{name}{where} calls a bare instance "
                             f"{'equal' if wanted else 'not unequal'} to an unrelated object")
    return found
