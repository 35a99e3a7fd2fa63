# Proxima: `make train` trains and evaluates the default agent; `make test` runs the fast tests.
# Both set up .venv first when needed (Python 3.11 or newer and make are all a fresh machine needs;
# Debian/Ubuntu: also the python3.X-venv package; another Python: make setup PYTHON=python3.12).
# `make test-container` builds docker/Dockerfile and checks the running container (root, apt, podman);
# `make ci-train` trains, evaluates and reports inside that image (docker/README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# requirements.lock pins numpy 2.4.x, which needs Python 3.11 or newer: checked before pip runs
PYTHON_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
PYTHON_OK = $(shell $(PYTHON) -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null)
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

.PHONY: setup train test test-slow test-all test-container ci-train bench learning report clean

setup: $(STAMP)

# torch is pinned to 2.13.0 (pyproject.toml); every other dependency is pinned by requirements.lock
# (the $(error) is expanded with the recipe, before its first command: one line, exit 2, nothing created)
$(STAMP): pyproject.toml requirements.lock
	$(if $(filter True,$(PYTHON_OK)),,$(error $(if $(PYTHON_VERSION),$(PYTHON) is Python $(PYTHON_VERSION),no Python found (PYTHON=$(PYTHON))); Proxima needs Python 3.11 or newer (requirements.lock pins numpy 2.4.x); choose one with PYTHON: make setup PYTHON=python3.11))
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
	$(BIN)/python -m pytest -q -m "not slow" --timeout 600 < /dev/null

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

report: setup
	$(BIN)/proxima train CartPole-v1 --total-timesteps 50000 --run-dir $(REPORT_RUN) --plot
	$(BIN)/proxima report $(REPORT_RUN)

clean:
	rm -rf $(VENV) .pytest_cache
