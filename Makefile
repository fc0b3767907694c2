# Two commands on a fresh machine:  `make run` (set up, run the main job)  and  `make test`.
VENV  ?= .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The simulator's hot modules compiled with mypyc (tools/build_native.py; sim/native.py says which
# and why), rebuilt whenever a source they may depend on changes. Without a C compiler the build
# says so and the simulator runs as Python: same results, slower.
NATIVE := $(VENV)/.native-stamp
NATIVE_SOURCES := $(shell find sim infralab -name '*.py' -not -path '*/__pycache__/*') tools/build_native.py tools/package_tree.py

.PHONY: setup run test typecheck bench-sim

$(STAMP): pyproject.toml setup.py constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,ray,real,mcp,optimize]'
	touch $(STAMP)

$(NATIVE): $(STAMP) $(NATIVE_SOURCES)
	$(BIN)/python tools/build_native.py
	touch $(NATIVE)

setup: $(NATIVE)

run: $(NATIVE)
	$(BIN)/infralab reproduce

test: $(NATIVE) typecheck
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -p no:cacheprovider

# mypy --strict over sim/, infralab/ and agent/validators/ (configuration: pyproject.toml, [tool.mypy]).
typecheck: $(STAMP)
	tools/typecheck.sh

bench-sim: $(NATIVE)
	$(BIN)/python benchmarks/sim_speed.py
