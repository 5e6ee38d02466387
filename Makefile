VENV ?= .venv
PY := $(VENV)/bin/python
PROTOS := $(wildcard protos/strongroom/v1/*.proto)

.PHONY: venv protos check-protos test up down clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3.11 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $@

# Regenerate the gRPC stubs from protos/ (the only source of truth).
protos: venv
	$(PY) scripts/gen_protos.py

# Fail when the committed stubs differ from what the protos generate.
check-protos: venv
	$(PY) scripts/gen_protos.py --check

# The whole suite: unit, integration (real etcd, real processes), slow failover tests, and the
# README's shell and Python examples against a real local cluster (tests/docs). Prints the 15
# slowest tests and every skipped one with its reason.
test: venv check-protos
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -rfEs

up: venv
	$(VENV)/bin/strongroom up

down:
	$(VENV)/bin/strongroom down

clean:
	rm -rf $(VENV) .strongroom

# Benchmarks against NATS JetStream, side by side (bench/; about 6-7 minutes).
# BENCH_ARGS="--quick" for a one-round smoke run.
.PHONY: bench
bench: venv $(VENV)/.bench-installed
	$(VENV)/bin/strongroom bench $(BENCH_ARGS)

$(VENV)/.bench-installed: pyproject.toml | venv
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $@

# Fault injection (services/strongroom/chaos/): every fault against a fresh cluster under a checked
# workload, then a table; exit status 1 on any failure. CHAOS_SECONDS=fault time per scenario
# (default 15), CHAOS_FAULTS=name,name (default all), CHAOS_SEED; CHAOS_ARGS passes options (e.g. --out DIR).
.PHONY: chaos
chaos: venv
	$(PY) -m strongroom.chaos $(CHAOS_ARGS)
