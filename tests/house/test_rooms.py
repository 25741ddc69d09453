"""The shape of the house (issue 69): no import circles, counting the imports inside
functions that hide them; HTTP routes reach the store only through the wiring's collections;
the rooms that DESIGN.md names exist where it puts them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("encoder", "index", "decoder", "wiring", "api", "cli", "stack")


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    """Each module of ours -> the modules of ours it imports (anywhere in the file)."""
    files = {module_of(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    out: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from a.b import c`: the module a.b.c when c is one, else a.b
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files
                         else node.module for a in node.names]
            else:
                continue
            deps |= {n for n in names if n in files and n != mod}
        out[mod] = deps
    return out


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    g = {m: {d for d in deps if not d.endswith("__init__")} for m, deps in graph().items()}
    # a package's face (its __init__ handing names on) is not a room of its own
    faces = {m for m in g if m in PACKAGES}
    g = {m: deps - faces for m, deps in g.items() if m not in faces}
    assert circles(g) == []


def test_the_circle_check_finds_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_index_has_its_sub_rooms() -> None:
    """index/ (issue 69): the contract and the steps every backend shares at its top, and
    one folder each for hybrid search, Milvus (with Lite's replacements), FAISS and the
    bulk job; Milvus-specific code lives under milvus/ only."""
    top = {p.stem for p in (ROOT / "index").glob("*.py")}
    assert {"store", "filters", "tenancy", "attend"} <= top
    assert not {t for t in top if t.startswith(("milvus", "lite", "faiss"))}
    for room, has in (("hybrid", "fusion"), ("milvus", "store"), ("milvus/lite", "speed"),
                      ("faiss", "store"), ("bulk", "job")):
        assert (ROOT / "index" / room / f"{has}.py").is_file(), room
    g = graph()
    lower = {m: d for m, d in g.items() if m.startswith("index.")}
    for m, deps in lower.items():  # the contract does not reach into a backend
        if m.count(".") == 1 and m != "index.evaluate":
            assert not {d for d in deps if d.startswith(("index.milvus", "index.faiss"))}, m


def test_routes_reach_the_store_through_the_wiring() -> None:
    """Searches and document writes are the collections' (wiring/collections.py): no HTTP
    route module plans a search or writes a document on the store itself."""
    routes = [p for p in (ROOT / "api").glob("*.py") if p.stem.endswith("routes")]
    assert len(routes) >= 5
    stores = {"index.milvus.store", "index.faiss.store", "index.guarded"}
    for path in routes:
        text = path.read_text(encoding="utf-8")
        deps = graph()[module_of(path)]
        assert not deps & stores, path
        for call in ("store.search", "store.upsert", "store.delete", "store.get,"):
            assert f"svc.{call}" not in text, (path, call)
    g = graph()
    wiring = set().union(*(d for m, d in g.items()
                           if m == "wiring.collections" or m.startswith("wiring.collections.")))
    assert {"wiring.encoders", "wiring.calibrator", "wiring.adapter"} <= wiring
    assert not any(d.startswith("api") for d in wiring)
    # the demo seeding writes through the collections' write path, as the routes do
    assert "wiring.collections" in g["wiring.demo"]
    assert "index.milvus.store" not in g["wiring.demo"]


def test_qkv_variables_are_settings_fields() -> None:
    """Issue 69, item 5: the service's QKV_ variables are read once, by pydantic-settings
    (api/settings.py) or a command's option; no module reads one from os.environ."""
    import re

    reads = re.compile(r"""(environ\.get\(|environ\[|getenv\()\s*["']QKV_""")
    found = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
             if reads.search(p.read_text(encoding="utf-8"))]
    assert found == []
    from api.settings import Runtime, Settings

    assert set(Runtime.model_fields) <= set(Settings.model_fields)
    assert {"device", "encoder_backend", "no_bf16", "onnx_activations",
            "lite_fast_search"} <= set(Runtime.model_fields)


def test_one_word_for_each_job() -> None:
    """Issue 69, item 6: inside the code "calibrate" is hybrid's calibration and "graded"
    the encoder's graded fine-tuning; "tune" names neither a module, a class nor a function
    below the HTTP schemas and the command line (which keep `POST .../tune`, `qkv tune`
    and `qkv tune-graded`)."""
    import re

    defined = re.compile(r"^\s*(def|class) \w*[Tt]un", re.M)
    found = [str(p.relative_to(ROOT)) for pkg in ("encoder", "index", "decoder", "wiring")
             for p in (ROOT / pkg).rglob("*.py")
             if "tun" in p.stem or defined.search(p.read_text(encoding="utf-8"))]
    assert found == []
