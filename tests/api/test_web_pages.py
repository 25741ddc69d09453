"""The web page's server side without a browser: the pages render with the server's own
settings, the script and style sheet come from the package, and ``/v1/pooling`` (which the
page shades text with) gives each text's tokens, weights and pieces."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from api_errors import error_of
from conftest import MakeClient
from fastapi.testclient import TestClient

# path -> its view, and its link in the nav (/ui, the landing, is the search view)
PAGES = {"/ui": ("search", "/ui/search"), "/ui/search": ("search", "/ui/search"),
         "/ui/collections": ("collections", "/ui/collections"),
         "/ui/attend": ("attend", "/ui/attend"), "/ui/generate": ("generate", "/ui/generate")}


def config(html: str) -> dict[str, object]:
    m = re.search(r'<script type="application/json" id="qkv-config">(.*?)</script>', html, re.S)
    assert m, "the page carries its configuration"
    return json.loads(m.group(1))  # type: ignore[no-any-return]


def test_root_leads_to_the_page(client: TestClient) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui"


@pytest.mark.parametrize("path", PAGES)
def test_each_page_renders_with_the_servers_settings(make_client: MakeClient, path: str
                                                     ) -> None:
    client = make_client(max_top_k=42, default_temperature=0.2)
    r = client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    view, link = PAGES[path]
    assert f'data-page="{view}"' in html
    assert f'<a href="{link}" aria-current="page">' in html
    assert html.count('aria-current="page"') == 1
    svc = client.app.state.service  # type: ignore[attr-defined]
    cfg = config(html)
    assert cfg["model"] == svc.info.name and cfg["dim"] == svc.info.dim
    assert cfg["max_top_k"] == 42 and cfg["temperature"] == 0.2
    assert cfg["key_required"] is False and cfg["demo_collection"] == "docs"
    if path in ("/ui", "/ui/search", "/ui/attend"):
        assert 'max="42"' in html
    assert "$" not in re.sub(r"<script.*?</script>", "", html, flags=re.S), "all filled in"
    # no CDN: every script and sheet is the server's own
    for src in re.findall(r'(?:src|href)="([^"]+\.(?:js|css)[^"]*)"', html):
        assert src.startswith("/ui/static/"), src
        assert client.get(src).status_code == 200


def test_the_landing_is_search_with_a_start_panel(make_client: MakeClient) -> None:
    """``/ui`` is the search view, the collections one click away in the nav; its "how to
    start" panel (shown by the script when the key sees no collection) leads to the
    collections view's create and upload forms and names the demo's command."""
    client = make_client(demo_collection="my-demo")
    html = client.get("/ui").text
    assert "<title>Search · qkv</title>" in html and 'id="search-form"' in html
    nav = re.search(r"<nav>(.*?)</nav>", html, re.S)
    assert nav and re.findall(r'href="([^"]+)"', nav.group(1)) == [
        "/ui/search", "/ui/collections", "/ui/attend", "/ui/generate"]
    start = re.search(r'<section id="start" class="panel" hidden>(.*?)</section>', html, re.S)
    assert start, "the panel is there, hidden until the script finds no collection"
    links = re.findall(r'href="([^"]+)"', start.group(1))
    assert links == ["/ui/collections#create", "/ui/collections#upload"]
    assert "<code>make run</code>" in start.group(1) and "qkv serve --demo" in start.group(1)
    assert config(html)["demo_collection"] == "my_demo", "the stored name, selected first"
    forms = client.get("/ui/collections").text
    for section, form in (("create", "create-form"), ("upload", "upload-form")):
        assert re.search(rf'<section id="{section}"[^>]*>\s*<h2>[^<]*</h2>\s*<form id="{form}"',
                         forms), section
    assert "/ui/collections" in client.get("/openapi.json").json()["paths"]


def test_static_files_and_unknown_pages(client: TestClient) -> None:
    scripts = [client.get(f"/ui/static/{n}") for n in ("core.js", "collections.js", "views.js")]
    assert all(js.status_code == 200 and "javascript" in js.headers["content-type"]
               for js in scripts)
    text = "".join(js.text for js in scripts)
    assert "sessionStorage" in text and "localStorage" not in text
    assert ".innerHTML" not in text, "server text goes in as text"
    assert client.get("/ui/static/qkv.css").headers["content-type"].startswith("text/css")
    for path in ("/ui/static/../web.py", "/ui/static/layout.html", "/ui/nope"):
        r = client.get(path)
        assert r.status_code == 404 and error_of(r)["error_type"] == "not_found", path


def test_pages_need_no_key_but_the_api_does(make_client: MakeClient) -> None:
    client = make_client(api_key="s3cret")
    page = client.get("/ui/search")
    assert page.status_code == 200 and config(page.text)["key_required"] is True
    assert "s3cret" not in page.text
    # issue 68, finding 6: no other site may frame it, and it runs only its own scripts
    csp = page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert client.post("/v1/pooling", json={"input": "a dog"}).status_code == 401
    ok = client.post("/v1/pooling", json={"input": "a dog"},
                     headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200


def test_pooling_gives_tokens_weights_and_pieces(client: TestClient) -> None:
    texts = ["A dog  runs in the park.", "Le café est très bon ☕"]
    r = client.post("/v1/pooling", json={"input": texts})
    assert r.status_code == 200, r.text
    body = r.json()
    enc = client.app.state.service.encoder  # type: ignore[attr-defined]
    assert body["model"] == client.app.state.service.info.name  # type: ignore[attr-defined]
    _, want = enc.encode(texts, return_weights=True)
    for i, (d, w) in enumerate(zip(body["data"], want, strict=True)):
        assert d["index"] == i and d["tokens"] == w.tokens and d["text"] == w.text
        np.testing.assert_allclose(d["weights"], w.weights, atol=1e-6)
        assert sum(d["weights"]) == pytest.approx(1.0, abs=1e-4)
        assert "".join(s["text"] for s in d["segments"]) == d["text"]
        assert [list(o) for o in w.offsets] == d["offsets"]
        assert d["truncated"] is False
    assert body["data"][0]["text"] == "A dog runs in the park."  # as the encoder read it


def test_pooling_limits(make_client: MakeClient) -> None:
    client = make_client(max_inputs=3)
    long = " ".join(["horse"] * 400)
    cut = client.post("/v1/pooling", json={"input": long}).json()["data"][0]
    assert cut["truncated"] is True and cut["segments"][-1]["weight"] is None
    r = client.post("/v1/pooling", json={"input": long, "truncate": False})
    assert r.status_code == 422 and "truncate" in error_of(r)["error"]
    assert client.post("/v1/pooling", json={"input": ["a"] * 4}).status_code == 413
    assert client.post("/v1/pooling", json={"input": []}).status_code == 422
    assert client.post("/v1/pooling", json={"input": 3}).status_code == 422
