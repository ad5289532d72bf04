# Two commands on a fresh machine: `make demo` and `make test`. Both install first when needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test test-fast bench soak lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# --no-compile: pip would compile every installed module (26 s of a 68-s install on 2 cores);
	# what the programs import is compiled on first use.
	$(PY) -m pip install -q --no-compile -e '.[analysis,dev]'
	touch $(STAMP)

install: $(STAMP)

# The embedded simulator, a short concurrency sweep, the analysis and its report.
demo: install
	$(VENV)/bin/capacity run scenarios/quickstart.yaml

# System packages the browser / Prometheus tests need: installed with apt-get when we are root and
# they are missing (the script says which and why). The suite runs on parallel workers, then the
# tests marked `measured` three at a time, then those marked `alone` one at a time, and prints one
# result and the 25 slowest tests (scripts/run_tests.py; TEST_WORKERS=N: the parallel workers;
# tests/README.md).
test: install
	bash scripts/ensure_system_deps.sh
	$(PY) scripts/run_tests.py

# Quick loop while developing: everything but the slow end-to-end runs.
test-fast: install
	$(PY) scripts/run_tests.py --fast

bench: install
	$(PY) bench/run_all.py

# The soak scenario on the embedded simulator, watched from outside: RSS and records over time.
# Not in CI. SOAK_S=600 for ten minutes (default one hour).
soak: install
	$(PY) bench/soak.py

lint: install
	$(VENV)/bin/ruff check capacity_plugins tests locustfiles bench scripts
	$(VENV)/bin/mypy capacity_plugins
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) results .pytest_cache
