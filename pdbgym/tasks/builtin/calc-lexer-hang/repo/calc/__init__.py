"""calc: evaluate arithmetic expressions with variables and a few functions."""

from calc.lexer import LexError, tokenize
from calc.parser import EvalError, evaluate

__all__ = ["LexError", "EvalError", "tokenize", "evaluate"]
