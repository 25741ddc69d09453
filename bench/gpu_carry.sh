#!/bin/sh
# What a lent GPU machine needs carried to run `qkv serve`, `qkv index` and `qkv adapt`
# (bench/serve_device.py, bench/adapt.py), into .gpu/ (which git ignores):
#
# * .gpu/whl: wheels of the packages the machines' image lacks (its package list: the device
#   tool's KINDS.md), for CPython 3.12 on x86-64 Linux, at the versions this project's venv
#   runs. About 23 MB, 18 of them faiss-cpu (Milvus Lite's vector index).
# * .gpu/data: Cranfield and STS-B dev from DATA (default ../shared/data), 2 MB, for
#   bench/adapt.py.
#
# With the checked-in files (about 36 MB) both fit the tool's 64 MiB a call, but not beside
# a training bundle.
#
# Usage: sh bench/gpu_carry.sh [DATA]
# Then name .gpu/whl and .gpu/data in the device tool's `carry`, and start the command with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site || exit 1;
# e.g. then `python3 bench/serve_device.py --record --results $OUT/results` (issue 43) and
# `python3 bench/adapt.py --data .gpu/data --sets cranfield --results $OUT/results` (issue 38).
# Both ran this way on a CPU (2026-11-28): a CPython 3.12 venv holding only packages the
# image lists, plus these wheels.
set -eu
DATA=${1:-../shared/data}
PY=${PYTHON:-.venv/bin/python}
mkdir -p .gpu/whl .gpu/data/beir .gpu/data/sts/stsbenchmark
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .gpu/whl \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 \
    annotated-types==0.8.0 typing-inspection==0.4.5 python-dotenv==1.2.4 \
    fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 httptools==0.9.0 orjson==3.13.0 \
    annotated-doc==0.0.7 opentelemetry-api==1.45.2 cachetools==8.0.2 \
    pymilvus==3.0.2 milvus-lite==3.2.2 faiss-cpu==1.15.1 \
    bm25s==0.3.16 PyStemmer==3.1.0 pytrec-eval-terrier==0.5.11 typer==0.29.2
cp -r "$DATA/beir/cranfield" .gpu/data/beir/
cp "$DATA/sts/stsbenchmark/sts-dev.csv" .gpu/data/sts/stsbenchmark/
du -sh .gpu/whl .gpu/data
