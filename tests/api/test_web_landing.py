"""The web page's landing (issue 42) in a real browser: ``/ui`` opens on Search, with a
collection selected and the collections table one click away in the nav, when the key sees
a collection; on a short "how to start" panel (create, upload, the demo) when it sees none.
Headless Chromium through selenium (the browser and helpers of test_web_ui) against a real
``qkv serve`` on an empty Milvus Lite file: no demo, the tiny encoder, an API key set.

With ``QKV_UI_SCREENSHOTS=DIR`` the panel's screenshot is ``DIR/ui-start.png``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import test_web_ui as ui
from test_web_ui import KEY, By, chromium, collection_rows, fill, login, select, shot, visible, wait
from uvicorn_server import UvicornServer

pytestmark = pytest.mark.slow
# test_web_ui's fixtures, here on this module's server
api, browser, shots = ui.api, ui.browser, ui.shots
OPTIONS = "#search-form [name=collection] option"  # filled once the collections are read


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Iterator[str]:
    """An empty store: the ``server`` that test_web_ui's ``browser`` and ``api`` use here."""
    if chromium() is None:
        pytest.skip("no Chromium and chromedriver on this machine (Debian: apt-get install "
                    "chromium chromium-driver)")
    tmp = tmp_path_factory.mktemp("ui-landing")
    srv = UvicornServer(tmp / "serve.log", [
        "--store", str(tmp / "empty.db"), "--model", str(tiny_encoder_dir)], {
            "QKV_API_KEY": KEY, "QKV_KEYS_FILE": str(tmp / "keys.jsonl")})
    url = srv.start()
    yield url
    srv.stop()


def land(driver: Any, server: str) -> str:
    """``/ui`` as a tab that has used no collection yet; what it opened on, once decided."""
    login(driver, server, "/ui")
    driver.execute_script("sessionStorage.removeItem('qkv-collection')")
    driver.get(server + "/ui")

    def decided(d: Any) -> str | None:
        if visible(d, "#start"):
            return "start"
        return "search" if d.find_elements(By.CSS_SELECTOR, OPTIONS) else None

    return wait(driver, decided, "the landing to decide")  # type: ignore[no-any-return]


def current(driver: Any) -> str:
    """The nav's link to the view shown."""
    return driver.find_element(  # type: ignore[no-any-return]
        By.CSS_SELECTOR, 'nav a[aria-current="page"]').text


def selected(driver: Any, form: str = "#search-form") -> str:
    return driver.find_element(  # type: ignore[no-any-return]
        By.CSS_SELECTOR, f"{form} [name=collection]").get_attribute("value")


def test_an_empty_store_opens_on_how_to_start(browser: Any, server: str, shots: Path) -> None:
    browser.get(server + "/ui")
    browser.execute_script("sessionStorage.clear()")
    assert land(browser, server) == "start"
    assert not visible(browser, "#search-form") and not visible(browser, "#search-results")
    assert current(browser) == "Search"
    start = browser.find_element(By.ID, "start")
    assert "make run" in start.text and "qkv serve --demo" in start.text
    links = {a.text: a.get_attribute("href") for a in start.find_elements(By.TAG_NAME, "a")}
    assert links == {"Create a collection": f"{server}/ui/collections#create",
                     "Upload documents": f"{server}/ui/collections#upload"}
    assert not visible(browser, "#start-no-admin"), "QKV_API_KEY is an admin key"
    size = browser.get_window_size()
    browser.set_window_size(390, 844)
    try:
        over = browser.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        assert over <= 0, f"the panel is {over} px wider than a phone"
    finally:
        browser.set_window_size(size["width"], size["height"])
    shot(browser, shots, "start")
    # one click to the form it names
    start.find_element(By.LINK_TEXT, "Create a collection").click()
    wait(browser, lambda d: visible(d, "#collections-empty"), "the collections view")
    assert browser.current_url == f"{server}/ui/collections#create"
    assert visible(browser, "#create-form") and current(browser) == "Collections"
    fill(browser, "#create-form [name=name]", "notes")
    browser.find_element(By.CSS_SELECTOR, "#create-form button").click()
    wait(browser, lambda d: "notes" in collection_rows(d), "the new collection")


def test_with_a_collection_it_opens_on_search(browser: Any, server: str,
                                              api: httpx.Client) -> None:
    assert [c["name"] for c in api.get("/v1/collections").json()["collections"]] == ["notes"]
    assert land(browser, server) == "search"
    assert visible(browser, "#search-form") and not visible(browser, "#start")
    assert selected(browser) == "notes" and current(browser) == "Search"
    # the collections table: one click away
    browser.find_element(By.CSS_SELECTOR, 'nav a[href="/ui/collections"]').click()
    wait(browser, lambda d: "notes" in collection_rows(d), "the collections table")
    assert browser.current_url == f"{server}/ui/collections"
    assert current(browser) == "Collections"


def test_the_selection_is_the_last_used_then_the_demos(browser: Any, server: str,
                                                       api: httpx.Client) -> None:
    """Selected first: the collection this tab used last, else the demo's (``docs``), else
    the first; and once the key sees none again, the panel is back."""
    for name in ("archive", "docs"):  # archive: listed first, so not picked by chance
        assert api.post("/v1/collections", json={"name": name}).status_code == 201
    try:
        assert land(browser, server) == "search" and selected(browser) == "docs"
        select(browser, "#search-form [name=collection]", "notes")
        fill(browser, "#search-form [name=query]", "anything")
        browser.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
        wait(browser, lambda d: visible(d, "#search-results"), "the search")
        for path, form in (("/ui", "#search-form"), ("/ui/attend", "#attend-form")):
            browser.get(server + path)
            wait(browser, lambda d, f=form: selected(d, f), path)
            assert selected(browser, form) == "notes", path
        assert api.delete("/v1/collections/notes").status_code == 200
        browser.get(server + "/ui")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, OPTIONS), "the collections")
        assert selected(browser) == "docs", "the last used is gone: the demo's"
    finally:
        for name in ("archive", "docs", "notes"):
            api.delete(f"/v1/collections/{name}")
    browser.get(server + "/ui")
    wait(browser, lambda d: visible(d, "#start"), "the panel once no collection is left")
    assert not visible(browser, "#search-form")
