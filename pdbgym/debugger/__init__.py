"""The live pdb session: a failing test under pdb in a sandbox, driven one command at a time."""

from pdbgym.debugger.breakpoints import Breakpoint, Edit, shift_breakpoints, shift_line
from pdbgym.debugger.session import DebuggerError, PdbReply, PdbSession

__all__ = ["Breakpoint", "DebuggerError", "Edit", "PdbReply", "PdbSession", "shift_breakpoints", "shift_line"]
