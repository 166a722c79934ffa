"""pdbgym: build, evaluate and train LLM agents that debug Python in a live pdb session."""

__version__ = "0.1.0"
