# Two commands on a fresh machine: `make test` and `make run`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
# The CPU wheel of torch lies on this machine's disk; pinning it first keeps pip from
# pulling a multi-GB CUDA build through the project's `torch>=` range.
TORCH := torch==2.13.0
DATA ?= ../shared/data

.PHONY: venv test lint typecheck run bench clean
PORT ?= 8000

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check . || true

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The service on 127.0.0.1:8000: shipped encoder, embedded Milvus Lite file under var/, and
# on first start a `docs` collection from the demo corpus (chunked Python documentation).
run: $(STAMP)
	mkdir -p var
	$(VENV)/bin/qkv serve --host 127.0.0.1 --port $(PORT) --store var/qkv.db \
		--model models/encoder-default --demo data/demo/python-docs.jsonl.gz

bench: $(STAMP)
	$(PIP) install -q -e '.[bench]'
	$(PY) bench/encode_speed.py --data $(DATA)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
