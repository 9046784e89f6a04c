# captionlib: the two set-up commands of the README.
#   make demo   create tools/venv if missing, run egs/mini_clotho end to end (XE, SCST), print RESULTS.md and
#               the command that captions the shipped clips with the packed SCST model (make demo-all: every RL objective)
#   make test   create tools/venv if missing, check the import layers (.importlinter), lint (ruff check, the
#               config in pyproject.toml), run the whole test suite
#               (it ends with the 25 slowest test phases: where CI time goes)
#   make peers  the peers' own code for bench/compare_peers.py: CoNeTTE's sources (its sdist, unpacked in
#               tools/peers/) and its one extra dependency, torchoutil, installed into tools/venv;
#               make peers-scp: self-critical.pytorch and its cider submodule from GitHub (git), and six
# PYTHON picks the interpreter used to create the virtual environment. TEST_JOBS is the number of
# pytest-xdist workers of make test (default: the CPU count, at most 4; TEST_JOBS=0 runs in one process).

PYTHON ?= python3
VENV := tools/venv
TORCH_VERSION ?= 2.13.0
TEST_JOBS ?= $(shell n=$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
STAMP := $(VENV)/.installed
# the console scripts tools/venv/bin/caption_* (one per captionbin/caption_*.py, see setup.py):
# reinstalled, without dependencies, when a binary is added or changed
SCRIPTS_STAMP := $(VENV)/.console_scripts

.PHONY: demo demo-all test venv clean-demo peers peers-scp

venv: $(STAMP)

$(STAMP): setup.py
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(VENV)/bin/python -m pip install --quiet -e ".[all]"
	touch $(STAMP)

$(SCRIPTS_STAMP): $(STAMP) $(wildcard captionbin/caption_*.py)
	$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(SCRIPTS_STAMP)

demo: $(STAMP) $(SCRIPTS_STAMP)
	egs/mini_clotho/demo.sh

demo-all: $(STAMP) $(SCRIPTS_STAMP)
	egs/mini_clotho/demo.sh --rl_algo "scst reinforce_plus sle ac mc_pg multitask ppo grpo dpo"

test: $(STAMP) $(SCRIPTS_STAMP)
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/ruff check captionlib captionbin bench tests
	$(VENV)/bin/python -m pytest -q tests -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder --durations 25

CONETTE_VERSION := 0.3.2
peers: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet torchoutil==0.3.1 torch==$(TORCH_VERSION)
	mkdir -p tools/peers
	$(VENV)/bin/python -m pip download --quiet --no-deps --no-binary :all: -d tools/peers conette==$(CONETTE_VERSION)
	tar -xzf tools/peers/conette-$(CONETTE_VERSION).tar.gz -C tools/peers
	@echo "then: $(VENV)/bin/python bench/compare_peers.py --conette tools/peers/conette-$(CONETTE_VERSION)"

SCP_COMMIT := 4c48a3304932d58c5349434e7b0085f48dcb4be4
peers-scp: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet six torch==$(TORCH_VERSION)
	test -d tools/peers/self-critical.pytorch || \
		git clone --quiet https://github.com/ruotianluo/self-critical.pytorch tools/peers/self-critical.pytorch
	git -C tools/peers/self-critical.pytorch checkout --quiet $(SCP_COMMIT)
	git -C tools/peers/self-critical.pytorch submodule update --init --quiet cider
	@echo "then: $(VENV)/bin/python bench/compare_peers.py --scp tools/peers/self-critical.pytorch"

clean-demo:
	cd egs/mini_clotho && rm -rf data dump exp RESULTS.md
