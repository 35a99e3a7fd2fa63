# Proxima: `make train` trains and evaluates the default agent; `make test` runs the fast tests.
# Both set up .venv first when needed (Python 3.11 and make are all a fresh machine needs).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.proxima-installed
RUN    ?= runs/CartPole-v1__make-train__$(shell date +%Y%m%d-%H%M%S)
REPORT_RUN ?= runs/report-demo__$(shell date +%Y%m%d-%H%M%S)
export OMP_NUM_THREADS ?= 1

.PHONY: setup train test test-slow test-all bench learning report clean

setup: $(STAMP)

# torch is pinned to 2.13.0 (pyproject.toml); every other dependency is pinned by requirements.lock
$(STAMP): pyproject.toml requirements.lock
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
