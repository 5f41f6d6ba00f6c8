# The two commands of the README are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup browser demo test test-quick notebook-screenshot bench bench-small bench-sampler bench-env fixtures clean

$(BIN)/scaldiag: pyproject.toml setup.py scaldiag/readers/xplane/_wire.c scaldiag/analyze/_hoststate.c scaldiag/readers/_kineto_scan.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,tensorflow,torch,dask,jax,lightning,transformers,flax]'
	touch $@

setup: $(BIN)/scaldiag

# Set everything up and run the main job on the bundled example (no GPU needed):
# profile a Keras training script whose input is slow (a Python PyDataset), then report it.
demo: setup
	$(BIN)/scaldiag profile --json report.json examples/train_cnn.py -- --steps 60 --slow-read
	@echo "JSON report written to report.json"

# The HTML report's browser test needs Debian's chromium. Installed where apt can (root, as in CI);
# elsewhere the test says it skips, and nothing else depends on it.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
		echo "chromium not installed: the HTML browser test will be skipped"

test: setup browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# A change's first check, in under 2 minutes: ruff and every test not marked slow (the end-to-end runs:
# real trainings, their subprocesses, the browser). `make test` is still the one that must pass.
test-quick: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not slow"

# docs/img/notebook.png: the notebook test's picture (examples/notebook.ipynb executed, as nbconvert's
# HTML in Chromium); the test writes it under its own temporary directory, this copies it.
notebook-screenshot: setup browser
	rm -rf build/notebook-shot
	$(BIN)/python -m pytest tests/test_notebook.py -k kernel --basetemp=build/notebook-shot -p no:cacheprovider
	cp build/notebook-shot/test_the_notebook_runs_in_a_ke0/notebook.png docs/img/notebook.png

# xprof lives in its own venv: it is a benchmark opponent, not a dependency.
bench/.venv-xprof/bin/python:
	$(PYTHON) -m venv bench/.venv-xprof
	bench/.venv-xprof/bin/pip install -q xprof==2.24.2

bench-env: bench/.venv-xprof/bin/python

# Every CPU benchmark with its defaults, one result file each (bench/results/NAME.md); `python -m bench`
# lists them with the claim each guards, `python -m bench NAME` runs one (bench/README.md). Hours, not
# minutes: analyze builds a 1 GB trace (xprof takes ~13 GB of memory there).
bench: setup bench-env
	$(BIN)/python -m bench --all cpu

# analyze at 27 and 270 MB only.
bench-small: setup bench-env
	$(BIN)/python -m bench analyze --copies 156,1560

# The NVML sampler's CPU use against the tests' fake NVML (on the GPU machine: without --fake).
bench-sampler: setup
	$(BIN)/python -m bench sampler --fake 8 --gpus 1,2,8 --seconds 5

# Re-record the TensorFlow-on-CPU fixture traces.
fixtures: setup
	rm -rf fixtures/tf_cpu/*/plugins
	$(BIN)/python fixtures/tf_cpu/make_tf_cpu_traces.py

clean:
	rm -rf $(VENV) bench/.venv-xprof bench/.venv-hta report.json
