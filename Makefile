VENV ?= .venv
PY := $(VENV)/bin/python
PROTOS := $(wildcard protos/strongroom/v1/*.proto)

.PHONY: soak venv protos check-protos test up down clean

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

# buf, from the npm registry (@bufbuild/buf), into .tools/buf: lint of protos/ (buf.yaml says
# which rules and why) and breaking-change check against protos/ of the previous commit (on
# main: the commit before the merge). Each says in one line when it is skipped.
BUF_VERSION := 1.75.0
BUF_DIR := .tools/buf
BUF := $(BUF_DIR)/node_modules/.bin/buf
BUF_AGAINST ?= HEAD~1
BUF_SKIP := skipped: npm is not installed (the buf CLI comes from the npm registry as @bufbuild/buf)

.PHONY: buf buf-lint buf-breaking
buf:
	@command -v npm >/dev/null 2>&1 || exit 0; \
	if ! { [ -x $(BUF) ] && [ "$$($(BUF) --version)" = "$(BUF_VERSION)" ]; }; then \
	  npm install --silent --no-audit --no-fund --prefix $(BUF_DIR) @bufbuild/buf@$(BUF_VERSION); fi

buf-lint: buf
	@if ! command -v npm >/dev/null 2>&1 || [ ! -x $(BUF) ]; then echo "buf lint $(BUF_SKIP)"; \
	else $(BUF) lint && echo "buf lint: protos/ clean"; fi

buf-breaking: buf
	@if ! command -v npm >/dev/null 2>&1 || [ ! -x $(BUF) ]; then echo "buf breaking $(BUF_SKIP)"; \
	elif ! git rev-parse -q --verify "$(BUF_AGAINST)^{commit}" >/dev/null; then \
	  echo "buf breaking skipped: no commit $(BUF_AGAINST) to compare protos/ with (a shallow clone?)"; \
	else rm -rf .tools/against && mkdir -p .tools/against && git archive "$(BUF_AGAINST)" protos | tar -x -C .tools/against && \
	  $(BUF) breaking --against .tools/against/protos && echo "buf breaking: protos/ compatible with $(BUF_AGAINST)"; fi

# checkov, the ecosystem's policy check of Kubernetes manifests, in a virtual environment of its
# own under .tools/ (it pins packaging, networkx and others below what the project uses);
# tests/deploy/test_chart_checkov.py runs it over the manifests of every ci/values scenario.
CHECKOV_VERSION := 3.3.30
CHECKOV_DIR := .tools/checkov
.PHONY: checkov
checkov: $(CHECKOV_DIR)/.installed-$(CHECKOV_VERSION)

$(CHECKOV_DIR)/.installed-$(CHECKOV_VERSION):
	rm -rf $(CHECKOV_DIR)
	python3.11 -m venv $(CHECKOV_DIR)
	$(CHECKOV_DIR)/bin/python -m pip install -q checkov==$(CHECKOV_VERSION)
	touch $@

# The whole suite: buf lint and breaking-change check of protos/, then unit, integration (real
# etcd, real processes), slow failover tests, and the README's shell and Python examples against
# a real local cluster (tests/docs). Two workers (pytest-xdist), each running whole modules (a
# module's shared cluster starts once), the longest first (tests/conftest.py), on ports of its
# own. Prints the 15 slowest tests and every skipped one with its reason.
TEST_WORKERS ?= 2
test: venv check-protos buf-lint buf-breaking checkov
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=15 -rfEs

up: venv
	$(VENV)/bin/strongroom up

down:
	$(VENV)/bin/strongroom down

clean:
	rm -rf $(VENV) .strongroom

# Benchmarks against NATS JetStream, side by side (bench/; about 8-9 minutes).
# BENCH_ARGS="--quick" for a one-round smoke run.
.PHONY: bench
bench: venv $(VENV)/.bench-installed
	$(VENV)/bin/strongroom bench $(BENCH_ARGS)

$(VENV)/.bench-installed: pyproject.toml | venv
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $@

# Fault injection (services/strongroom/chaos/): every fault against a fresh cluster under a checked
# workload, then a table; exit status 1 on any failure. CHAOS_SECONDS=fault time per scenario
# (default 15), CHAOS_FAULTS=name,name (default all), CHAOS_SEED, CHAOS_PAIRS=N (pairs of faults at once); CHAOS_ARGS passes options (e.g. --out DIR).
.PHONY: chaos
chaos: venv
	$(PY) -m strongroom.chaos $(CHAOS_ARGS)

# The soak run (not in CI): SOAK_MINUTES (default 60) of mixed load with a leader SIGKILL every
# SOAK_KILL_EVERY seconds (default 180), then the history checker; the members' resident memory
# over time in memory.png and memory.json of the run's directory. Fails on any loss or on memory
# growth above 10% after the first ten minutes. SOAK_ARGS passes options (e.g. --out DIR --json).
SOAK_MINUTES ?= 60
SOAK_KILL_EVERY ?= 180
soak: venv
	$(PY) -m strongroom.chaos.soak --minutes $(SOAK_MINUTES) --kill-every $(SOAK_KILL_EVERY) $(SOAK_ARGS)
