"""The web page: ``/ui/search``, ``/ui/collections``, ``/ui/attend`` and ``/ui/generate``,
rendered here from the templates in ``api/ui/`` with what the server knows (its encoder,
limits and defaults), and three scripts and one style sheet served from the package (no CDN,
no build step). The script calls the same ``/v1`` API as any client, with the API key the
user types in (kept in the tab's session storage, never in a URL); the pages themselves
hold no data, so they need no key. ``GET /`` leads to ``/ui``, the landing: the search
view, which the script turns into a short "how to start" panel (create, upload, the demo)
when the key in use sees no collection. ``POST /`` stays free for TEI."""

from __future__ import annotations

import hashlib
import html
import math
from functools import cache
from pathlib import Path
from string import Template
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from api.errors import not_found
from api.schemas import COLLECTION_NAME_HELP
from index import collection_name

UI = Path(__file__).with_name("ui")
PAGES = {"search": ("Search", "search.html"), "collections": ("Collections", "collections.html"),
         "attend": ("Attend", "attend.html"), "generate": ("Generate", "generate.html")}
LANDING = "search"  # the view /ui opens on (with no collection: its "how to start" panel)
TOP_K = {"search": 10, "attend": 8}  # the query form's default top k (query-fields.html)
JS = "text/javascript; charset=utf-8"
SCRIPTS = ("core.js", "collections.js", "views.js")  # in this order: each uses the ones before
STATIC = {**dict.fromkeys(SCRIPTS, JS), "qkv.css": "text/css; charset=utf-8"}
UPLOAD_BATCH = 64  # documents per upsert request from the upload form

web = APIRouter(tags=["web page"])


@cache
def _template(name: str) -> Template:
    return Template((UI / name).read_text(encoding="utf-8"))


@cache
def _static(name: str) -> bytes:
    return (UI / "static" / name).read_bytes()


@cache
def static_version() -> str:
    """A digest of the scripts and style sheet: their URLs change when they do."""
    return hashlib.sha256(b"".join(_static(n) for n in sorted(STATIC))).hexdigest()[:12]


def _nav(current: str) -> str:
    links = []
    for slug, (title, _) in PAGES.items():
        here = ' aria-current="page"' if slug == current else ""
        links.append(f'<a href="/ui/{slug}"{here}>{title}</a>')
    return "".join(links)


def page_config(request: Request) -> dict[str, Any]:
    """What the script needs from the server: its encoder, defaults and limits."""
    settings = request.app.state.settings
    svc = request.app.state.service
    return {"model": svc.info.name, "dim": svc.info.dim, "dense_weight": svc.dense_weight,
            "temperature": settings.default_temperature, "max_top_k": settings.max_top_k,
            "max_inputs": settings.max_inputs,
            "upload_batch": min(UPLOAD_BATCH, settings.max_documents),
            "key_required": not request.app.state.keys.open,
            # the collection a view selects first when this tab has used none yet
            "demo_collection": collection_name(settings.demo_collection)}


def render(request: Request, slug: str) -> str:
    title, view = PAGES[slug]
    config = page_config(request)
    t = config["temperature"]
    values = {"max_top_k": config["max_top_k"], "temperature": f"{t:g}",
              "log_temperature": f"{math.log10(t):.2f}", "batch": config["upload_batch"],
              "name_help": COLLECTION_NAME_HELP}
    fields = _template("query-fields.html").substitute(max_top_k=config["max_top_k"],
                                                       top_k=TOP_K.get(slug, 10))
    main = _template(view).substitute({**{k: html.escape(str(v)) for k, v in values.items()},
                                       "query_fields": fields})
    # JSON inside <script>: '<' escaped so no text can close the element
    data = orjson.dumps(config).decode().replace("<", "\\u003c")
    model = f"{config['model']} · {config['dim']}-d"
    scripts = "\n".join(f'<script src="/ui/static/{n}?v={static_version()}"></script>'
                        for n in SCRIPTS)
    return _template("layout.html").substitute(scripts=scripts,
        title=html.escape(title), page=slug, nav=_nav(slug),
        model=html.escape(model), main=main, config=data, version=static_version(),
        version_label=html.escape(request.app.version))


@web.get("/", status_code=307, response_class=RedirectResponse,
         responses={307: {"description": "To the web page, /ui"}})
async def root() -> Response:
    """The web page (``POST /`` is TEI's embedding route)."""
    return RedirectResponse("/ui", status_code=307)


# The page runs only its own scripts (no inline script: the config is a JSON block), loads
# nothing from elsewhere, and may not be framed by another site (clickjacking). Its script
# sets style attributes, hence 'unsafe-inline' for styles alone.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer"}


def _page(slug: str, landing: bool = False) -> Any:
    async def view(request: Request) -> Response:
        return HTMLResponse(render(request, slug), headers=PAGE_HEADERS)

    name = PAGES[slug][0].lower()
    view.__doc__ = (f"The web page's landing: its {name} view, or where the key sees no "
                    "collection yet, how to create one, upload documents or start the demo "
                    "(HTML)." if landing else f"The web page's {name} view (HTML).")
    view.__name__ = "landing_page" if landing else f"{name}_page"
    return view


web.add_api_route("/ui", _page(LANDING, landing=True), methods=["GET"],
                  response_class=HTMLResponse)
for _slug in PAGES:
    web.add_api_route(f"/ui/{_slug}", _page(_slug), methods=["GET"],
                      response_class=HTMLResponse)


@web.get("/ui/static/{name}", include_in_schema=False)
async def static(name: str) -> Response:
    if name not in STATIC:
        raise not_found(f"no file /ui/static/{name}")
    return Response(_static(name), media_type=STATIC[name],
                    headers={"Cache-Control": "public, max-age=86400"})
