"""The house's arrows run one way (DESIGN.md, "Packages"): encoder, index → decoder → wiring
→ api, cli, stack. Read from the source (every import statement, those inside functions
too) and checked once more by importing in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("encoder", "index", "decoder", "wiring", "api", "cli", "stack")
WEB = {"fastapi", "starlette", "uvicorn"}
OURS_ABOVE = {"wiring", "api", "cli", "stack"}
# package -> the top-level modules it must never import
FORBIDDEN: dict[str, set[str]] = {
    "index": {"torch", "encoder", "decoder", "typer", *WEB, *OURS_ABOVE},
    "encoder": {"decoder", "typer", *WEB, *OURS_ABOVE},
    "decoder": {"typer", *WEB, *OURS_ABOVE},
    "wiring": {"typer", *WEB, "api", "cli", "stack"},
    "api": {"typer", "cli", "stack"},
    "stack": {"typer", *WEB, "api", "cli"},
}
WARN_LINES = 400  # a file this long is worth a look: is it one concept?
MAX_LINES = 800  # beyond this, no concept is that long: cut it along its concepts


def imports(path: Path) -> set[str]:
    """Top-level module names ``path`` imports (absolute imports; the house uses no others)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            names.add((node.module or "").split(".")[0])
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_against_the_arrows(package: str) -> None:
    files = sources(package)
    assert files, f"no package {package}/"
    wrong = {str(f.relative_to(ROOT)): sorted(imports(f) & FORBIDDEN[package]) for f in files}
    assert not {f: w for f, w in wrong.items() if w}


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def g():\n    import torch.nn\n    from api.app import create_app\n")
    assert imports(f) == {"torch", "api"}


def test_index_loads_without_torch_or_the_web_stack() -> None:
    """Every module of index/ imported in a fresh interpreter: nothing pulls torch or
    FastAPI in, directly or through another package."""
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in sources("index")
               if p.stem != "__init__"]
    assert "index.milvus.lite.speed" in modules and "index.store" in modules
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'fastapi', 'starlette', 'typer', 'encoder', 'decoder', 'api', 'cli'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == []


def test_api_has_http_only() -> None:
    """No command line and no process launcher in api/."""
    names = {p.stem for p in sources("api")}
    assert not {n for n in names if n.endswith("_commands") or n in ("cli", "stack")}
    for f in sources("api"):
        text = f.read_text(encoding="utf-8")
        assert "subprocess" not in imports(f) and "typer" not in text, f


@pytest.mark.parametrize("package", PACKAGES)
def test_files_stay_small(package: str) -> None:
    """The line cap is a warning, not a reason to squeeze lines or to split a file along
    anything but its concepts (issue 69); only a file past ``MAX_LINES`` fails."""
    sizes = {str(f.relative_to(ROOT)): len(f.read_text(encoding="utf-8").splitlines())
             for f in sources(package)}
    long = {f: n for f, n in sizes.items() if n > WARN_LINES}
    if long:
        warnings.warn(f"over {WARN_LINES} lines (one concept each?): {long}", stacklevel=1)
    too_long = {f: n for f, n in long.items() if n > MAX_LINES}
    assert not too_long, f"over {MAX_LINES} lines: {too_long}"
