"""The docs site: its generated pages agree with the code, `mkdocs build --strict` passes (no
broken link, no page missing from the navigation), the README's links lead somewhere, and
pages stay short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from docsite import generated

ROOT = Path(__file__).resolve().parents[2]


def test_generated_pages_agree_with_the_code() -> None:
    assert generated.stale() == [], "run: python -m docsite.generated"


def test_a_route_the_code_lacks_would_show(tmp_path: Path) -> None:
    pages = generated.pages()
    for uri, text in pages.items():
        (tmp_path / uri).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / uri).write_text(text, encoding="utf-8")
    assert generated.stale(tmp_path) == []
    http = tmp_path / "reference/http/index.md"
    http.write_text(http.read_text() + "| `GET /v1/imaginary` | a route that is not there |\n")
    (tmp_path / "reference/cli/gone-commands.md").write_text("# a command group that is not\n")
    assert generated.stale(tmp_path) == ["reference/http/index.md",
                                         "reference/cli/gone-commands.md"]


def test_every_route_command_and_setting_is_in_the_reference() -> None:
    pages = generated.pages()
    http = "".join(t for u, t in pages.items() if u.startswith("reference/http/"))
    for path, ops in generated.openapi()["paths"].items():
        for method in ops:
            assert f"`{method.upper()} {path}`" in http
    from api.settings import Settings

    for name in Settings.model_fields:
        assert f"`QKV_{name.upper()}`" in pages["reference/settings.md"]
    assert "## qkv index" in pages["reference/cli/index-commands.md"]
    assert "`--shard`" in pages["reference/cli/index-commands.md"]


@pytest.mark.slow
def test_mkdocs_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False, env={"NO_MKDOCS_2_WARNING": "1",
                                                         "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site/reference/http/index.html").exists()
    assert (tmp_path / "site/tutorial/index.html").exists()


def test_the_readme_links_lead_to_files() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_pages_stay_short() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024
    over = {str(p.relative_to(ROOT)): p.stat().st_size for p in (ROOT / "docs").rglob("*.md")
            if p.stat().st_size > 15 * 1024}
    assert over == {}
    assert len((ROOT / "bench/RESULTS.md").read_bytes()) <= 15 * 1024
