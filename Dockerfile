# The qkv API: `qkv serve` with the shipped encoder, decoders and demo corpora.
#
#   docker build -t qkv .                                   # CPU torch (default)
#   docker build -t qkv:cuda --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 .
#
# CUDA wheels of torch carry their own CUDA runtime, so the slim base serves both; a GPU
# container needs only the host's NVIDIA driver and container toolkit (`--gpus all`).
# PYTHON_IMAGE picks another base (it must have Python 3.11+ as `python`).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# libgomp: OpenMP for faiss and milvus-lite; libstdc++: C++ runtime of the native wheels.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libstdc++6 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# torch first, from the chosen index, so the project's `torch>=` range is already met and
# pip never pulls the multi-GB default build.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"

# The other dependencies in their own layer: it is rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY encoder/ encoder/
COPY index/ index/
COPY decoder/ decoder/
COPY wiring/ wiring/
COPY api/ api/
COPY cli/ cli/
COPY stack/ stack/
RUN pip install --no-deps .

# The shipped encoder and decoders, and the demo corpora loaded on the first start where
# QKV_DEMO_CORPUS / QKV_DEMO_TM name them (python-docs; the Multi30k en-fr translation memory).
COPY models/ models/
COPY data/demo/ data/demo/

RUN useradd --system --uid 10001 --no-create-home --home-dir /app qkv \
    && mkdir -p /app/var \
    && chown qkv /app/var
USER qkv

ENV QKV_MODEL=/app/models/encoder-default
# The encoder's built graph (encoder/graph_cache.py) in the volume, which the user can write
# (its home, /app, it cannot) and which outlives the container: a restart skips the build
ENV QKV_GRAPH_CACHE=/app/var/graphs
EXPOSE 8000
VOLUME ["/app/var"]

# /health answers once the encoder is loaded (and, on a first start with QKV_DEMO_CORPUS or
# QKV_DEMO_TM, the demo collections are written).
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]

CMD ["qkv", "serve", "--host", "0.0.0.0", "--port", "8000"]
