# Proxima: `make train` trains and evaluates the default agent; `make test` runs the fast tests.
# Both set up .venv first when needed (Python 3.11 or newer and make are all a fresh machine needs;
# Debian/Ubuntu: also the python3.X-venv package; another Python: make setup PYTHON=python3.12).
# `make test-container` builds docker/Dockerfile and checks the running container (root, apt, podman);
# `make ci-train` trains, evaluates and reports inside that image (docker/README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# requirements.lock pins numpy 2.4.x, which needs Python 3.11 or newer: checked before pip runs
PYTHON_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
PYTHON_OK = $(shell $(PYTHON) -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null)
# a command that exists but does not run (a pyenv shim of a version not selected): its own first line says why
PYTHON_PATH = $(shell command -v $(PYTHON) 2>/dev/null)
PYTHON_FAILURE = $(shell $(PYTHON) -c 'import sys' 2>&1 >/dev/null | sed -n '/[^[:space:]]/{p;q;}')
PYTHON_MISSING = $(if $(PYTHON_PATH),$(PYTHON) ($(PYTHON_PATH)) did not run$(if $(PYTHON_FAILURE),: $(PYTHON_FAILURE)),no Python found (PYTHON=$(PYTHON)))
# the interpreter behind a command, as the one behind .venv/bin/python is compared with it
PYTHON_REAL = $(shell $(PYTHON) -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))' 2>/dev/null)
VENV_REAL = $(realpath $(BIN)/python)
VENV_VERSION = $(shell sed -n 's/^version[_a-z]* *= *//p' $(VENV)/pyvenv.cfg 2>/dev/null)
# PYTHON named on the command line or in the environment, not the default
PYTHON_GIVEN = $(filter command line environment,$(origin PYTHON))
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.proxima-installed
RUN    ?= runs/CartPole-v1__make-train__$(shell date +%Y%m%d-%H%M%S)
# expanded once: `?=` alone runs `date` at each use, and train and eval could name two directories
RUN    := $(RUN)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE  ?= proxima:$(VERSION)
REPORT_RUN ?= runs/report-demo__$(shell date +%Y%m%d-%H%M%S)
REPORT_RUN := $(REPORT_RUN)
export OMP_NUM_THREADS ?= 1
# pytest-xdist processes for `make test`: one per CPU, at most 4 (each holds torch and a warm-python server;
# the tests are mostly single-threaded and waiting on subprocesses); 0 (one CPU, or TEST_JOBS=0 or empty)
# runs them in pytest's own process. A test file's tests stay in one process (--dist loadfile): its
# module fixtures are built once.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; [ "$$n" -lt 2 ] && n=0; echo $$n)

.PHONY: help setup check-python train test test-slow test-all test-container ci-train bench learning report clean jax-venv

# the first target: a plain `make` lists the targets instead of quietly setting up .venv
help:
	@echo 'make setup         create .venv (Python 3.11+; another: make setup PYTHON=python3.12) with the pinned dependencies'
	@echo 'make train         set up, train PPO on CartPole-v1 (500k steps: about 2-4 min on 2 cores) and evaluate it'
	@echo 'make report        set up, train a short run (100 iterations) with a plot and print its report'
	@echo 'make test          set up, run the fast tests; make test-slow: the slow ones; make test-all: both'
	@echo 'make bench         set up, measure steps per second on CartPole-v1 at 4 to 4096 envs'
	@echo 'make learning      set up, run the learning benchmark (benchmarks/learning.py; hours)'
	@echo 'make jax-venv      create .jax-venv (Python 3.12, JAX) for PureJaxRL, the peer of benchmarks/vs_purejaxrl.py'
	@echo 'make test-container, make ci-train   build and check the container image; train in it (docker/README.md)'
	@echo 'make clean         remove .venv and .pytest_cache (runs/ stays)'

setup: $(STAMP)

# Run before the stamp's recipe each time (order-only: it never makes the stamp out of date). A PYTHON
# given for an existing .venv was ignored once the stamp was up to date: the user kept the old Python.
# With no PYTHON given and .venv set up it checks nothing, so `make test` stays a no-op setup. The same
# version at another path (a CI's exported PYTHON, a venv made with --copies) is the same Python to pip.
# (the $(error)s are expanded with the recipe, before its first command: one line, exit 2, nothing created)
check-python:
	$(if $(or $(PYTHON_GIVEN),$(if $(wildcard $(VENV)/pyvenv.cfg),,missing)),$(if $(filter True,$(PYTHON_OK)),,$(error $(if $(PYTHON_VERSION),$(PYTHON) is Python $(PYTHON_VERSION),$(PYTHON_MISSING)); Proxima needs Python 3.11 or newer (requirements.lock pins numpy 2.4.x); choose one with PYTHON: make setup PYTHON=python3.11)))
	$(if $(and $(PYTHON_GIVEN),$(wildcard $(VENV)/pyvenv.cfg)),$(if $(or $(filter $(VENV_REAL),$(PYTHON_REAL)),$(filter $(VENV_VERSION),$(PYTHON_VERSION))),,$(error $(PYTHON) is Python $(PYTHON_VERSION) ($(PYTHON_REAL)), but $(VENV) was made with Python $(VENV_VERSION) ($(or $(VENV_REAL),its python is missing)): remove it first (make clean, or rm -rf $(VENV)), then make setup PYTHON=$(PYTHON))))
	@:

# torch is pinned to 2.13.0 (pyproject.toml); every other dependency is pinned by requirements.lock
$(STAMP): pyproject.toml requirements.lock | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e ".[dev,rlhf,video]"
	@touch $(STAMP)

train: setup
	$(BIN)/proxima train CartPole-v1 --run-dir $(RUN)
	$(BIN)/proxima eval $(RUN) --episodes 10

# stdin from /dev/null: a runner that starts make with no standard input at all (fd 0 closed) would
# otherwise break IPython's import inside pytest's capture (the notebook test)
test: setup
	$(BIN)/python -m pytest -q -m "not slow" --timeout 600 -n $(or $(TEST_JOBS),0) --dist loadfile < /dev/null

# builds the image on a local Debian base with the CPU torch wheel, runs it, checks it from outside
test-container:
	IMAGE=$(IMAGE) PYTHON=$(PYTHON) bash tests/container/run.sh < /dev/null

# the CI loop in the container: train the default agent, evaluate, report.md into runs/ci/; exit 1
# when the evaluation is below the env's threshold (needs the image: docker build ... or make test-container)
ci-train:
	IMAGE=$(IMAGE) bash docker/ci_train.sh < /dev/null

test-slow: setup
	$(BIN)/python -m pytest -q -m slow --timeout 3600

test-all: setup
	$(BIN)/python -m pytest -q -m "" --timeout 3600

bench: setup
	$(BIN)/proxima bench CartPole-v1 --num-envs 4,64,1024,4096

learning: setup
	$(BIN)/python benchmarks/learning.py

# 51,200 steps: 100 whole iterations of CartPole-v1's 512-step batch (50,000 drew the note on a partial one)
report: setup
	$(BIN)/proxima train CartPole-v1 --total-timesteps 51200 --run-dir $(REPORT_RUN) --plot
	$(BIN)/proxima report $(REPORT_RUN)

# PureJaxRL's own interpreter for benchmarks/vs_purejaxrl.py and population_vs_purejaxrl.py, with the pins of
# benchmarks/anchors/README.md: JAX 0.11 needs Python 3.12, python3.12 (pyenv's 3.12.1 when the plain command
# does not run one) or JAX_PYTHON=...; JAX_VENV=DIR makes it elsewhere (the scripts' --jax-python DIR/bin/python)
JAX_PYTHON ?= python3.12
JAX_VENV   ?= .jax-venv
JAX_PY312   = import sys; sys.exit(sys.version_info[:2] != (3, 12))

jax-venv:
	@py='$(JAX_PYTHON)'; \
	if ! $$py -c '$(JAX_PY312)' 2>/dev/null; then \
	  if PYENV_VERSION=3.12.1 $$py -c '$(JAX_PY312)' 2>/dev/null; then py="env PYENV_VERSION=3.12.1 $$py"; \
	  else echo "make jax-venv: $(JAX_PYTHON) does not run a Python 3.12, which JAX 0.11 needs: install one and name it: make jax-venv JAX_PYTHON=/path/to/python3.12" >&2; exit 2; fi; \
	fi; \
	set -ex; $$py -m venv $(JAX_VENV); \
	$(JAX_VENV)/bin/python -m pip install --quiet jax==0.11.2 flax optax chex numpy matplotlib seaborn; \
	$(JAX_VENV)/bin/python -m pip install --quiet --no-deps gymnax==1.0.1 gymnasium==1.4.0 farama-notifications==0.0.4 six

clean:
	rm -rf $(VENV) .pytest_cache
