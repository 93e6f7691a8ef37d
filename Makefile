# Developer shortcuts. Run from the repository root; `python -m` puts it on sys.path,
# so these work before `pip install -e .` too (PYTHONPATH covers the plain script).
PYTHON ?= python

.PHONY: test bench lint golden

test:
	$(PYTHON) -m pytest -q

bench:
	$(PYTHON) -m pytest benchmarks --benchmark-enable --benchmark-json=benchmarks/last.json

lint:
	$(PYTHON) -m ruff check .

# Regenerate tests/golden/rules_traces.json after an intended rules change; review the diff.
golden:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) tests/make_golden_traces.py
