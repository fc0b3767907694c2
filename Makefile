# Two commands on a fresh machine:  `make run` (set up, run the main job)  and  `make test`.
VENV  ?= .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup run test typecheck bench-sim

$(STAMP): pyproject.toml setup.py constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,ray,real,mcp,optimize]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/infralab reproduce

test: $(STAMP) typecheck
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -p no:cacheprovider

# mypy --strict over sim/, infralab/ and agent/validators/ (configuration: pyproject.toml, [tool.mypy]).
typecheck: $(STAMP)
	tools/typecheck.sh

bench-sim: $(STAMP)
	$(BIN)/python benchmarks/sim_speed.py
