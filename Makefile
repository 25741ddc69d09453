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

.PHONY: venv browser test test-long lint typecheck run stack stack-down bench train docs docs-serve clean
PORT ?= 8000
MILVUS_PORT ?= 19530

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# The web page's browser tests (tests/api/test_web_ui.py) drive Debian's Chromium through
# selenium: installed here where apt can (as root); elsewhere those tests skip, saying why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null) || echo "chromium not installed: browser tests skip"; \
	else echo "no chromium and no root apt-get: the browser tests will be skipped"; fi

# pytest runs in TEST_WORKERS processes (pytest-xdist): most tests wait on a server, a
# subprocess or a store's time tick for part of their run, and two of them share the 2
# cores better than one (38 min 36 s in one process, 20 min 26 s in two, here)
TEST_WORKERS ?= 2

test: $(STAMP) browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=30

# The long crash, fault and load runs (marked `long`), which `make test` leaves out to stay
# under 40 minutes on 2 cores: Ray's fault runs, kill -9, full disks, a store outage, the
# fuzz pass, the S3-bucket runs, and the Milvus-server twins of some API runs
test-long: $(STAMP) browser
	$(PY) -m pytest -q -m long

# The docs site (MkDocs, Material theme) into site/: the reference and benchmark pages are
# generated from the code and bench/results first (docsite/generated.py); `make test` checks
# that the committed ones agree and builds the site with --strict (tests/docs).
docs: $(STAMP)
	$(PY) -m docsite.generated
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8001

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check . || true

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The service on 127.0.0.1:8000: shipped encoder, embedded Milvus Lite file under var/, and
# on first start a `docs` collection from the demo corpus (chunked Python documentation)
# and a `tm-en-fr` translation memory (the 29,000 Multi30k training pairs) whose generate
# translates English to French with the shipped decoder, and once filled that collection's
# token memory (kNN-MT), built in the background under var/knn/ and read on later starts.
DEMO := --demo data/demo/python-docs.jsonl.gz --demo-tm data/demo/multi30k-en-fr.jsonl.gz \
	--decoder tm-en-fr=models/decoder-en-fr --demo-token-memory var/knn/tm-en-fr

run: $(STAMP)
	mkdir -p var
	$(VENV)/bin/qkv serve --host 127.0.0.1 --port $(PORT) --store var/qkv.db \
		--model models/encoder-default $(DEMO)

# The same service against a real Milvus standalone server (PyPI milvus==2.3.5, data under
# var/stack/), both as child processes, no Docker: Ctrl-C (or `make stack-down` from another
# terminal) stops both. Same demo collections as `make run`.
stack: $(STAMP)
	$(PIP) install -q 'milvus==2.3.5'
	$(VENV)/bin/qkv stack up --var-dir var/stack --port $(PORT) --milvus-port $(MILVUS_PORT) \
		--model models/encoder-default $(DEMO)

stack-down:
	$(VENV)/bin/qkv stack down --var-dir var/stack

bench: $(STAMP)
	$(PIP) install -q -e '.[bench]'
	$(PY) bench/encode_speed.py --data $(DATA)

# Encoder v3 from the shared data alone (models/train-encoder-v3.sh: dev collections, bundle,
# network, token bag; rerunning resumes). On a CPU the network takes many hours; on one
# H200 5.6 min. The result lands in var/train-v3/runs/v3.
train: $(STAMP)
	DATA=$(DATA) PY=$(PY) SEED=$${SEED:-1} bash models/train-encoder-v3.sh

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
