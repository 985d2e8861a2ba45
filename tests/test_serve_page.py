"""The page of ``alignir serve`` in a real browser: Debian's headless Chromium driven by Selenium
loads it against a served ADI index, runs a query, and finds in the DOM the hits with each leg's
score, the matched aligned tokens and BM25 words highlighted with their weight, the query's
expansion tokens and the fusion plan. A screenshot goes to $ALIGNIR_SCREENSHOT when set (the
docs' docs/serving-page.png comes from the SmolLM2 run), else to a temp folder."""
from __future__ import annotations

import os
import re
import shutil

import pytest

# a real browser: end to end (scripts/test.sh --fast leaves it out)
pytestmark = pytest.mark.e2e

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from alignir.retrieval.server import build_app  # noqa: E402
from alignir.retrieval.server.run import ServerThread  # noqa: E402

from conftest import ADI  # noqa: E402

INSTALL = "bash scripts/setup_browser.sh (apt-get install -y chromium chromium-driver; pip install selenium)"
QUERY = "computer information retrieval systems"
MODE = "dense+sparse+bm25"


def _driver():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(f"selenium is not installed: {INSTALL}")
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(f"chromium is not installed: {INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1100,1300", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def _check_page(index, loaded, shot, aligned_words: bool) -> None:
    """``aligned_words``: the model's aligned tokens are words that the text shows (SmolLM2;
    the tiny random model's are byte pieces, listed under each hit but not found in the text)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = _driver()
    app = build_app(index, loaded=loaded)
    try:
        with ServerThread(app) as srv:
            driver.get(srv.url + "/")
            WebDriverWait(driver, 60).until(lambda d: d.execute_script(
                "return fetch('/readyz').then(r => r.status)") == 200)
            driver.find_element(By.ID, "q").send_keys(QUERY)
            Select(driver.find_element(By.ID, "mode")).select_by_value(MODE)
            driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            WebDriverWait(driver, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "li.hit")) == 10)
            hits = driver.find_elements(By.CSS_SELECTOR, "li.hit")
            for hit in hits:  # each leg's score is shown
                scores = hit.find_element(By.CSS_SELECTOR, ".scores").text
                assert all(f"{leg} " in scores for leg in ("dense", "sparse", "bm25")), scores
            aligned = driver.find_elements(By.CSS_SELECTOR, "li.hit .hl-aligned")
            bm25 = driver.find_elements(By.CSS_SELECTOR, "li.hit .hl-bm25")
            assert bm25 and (aligned or not aligned_words)
            assert driver.find_elements(By.CSS_SELECTOR, "li.hit .why-sparse li")  # the aligned tokens listed
            weights = [float(e.get_attribute("data-weight")) for e in aligned + bm25]
            assert all(0 < w <= 1 for w in weights) and max(weights) == 1.0
            stems = [w[:4] for w in QUERY.lower().split()]
            for e in bm25:  # a BM25 word shown is a query word (stemmed)
                assert any(e.text.lower().startswith(s) for s in stems), e.text
            chips = driver.find_elements(By.CSS_SELECTOR, "#expansion .chip")
            assert driver.find_elements(By.CSS_SELECTOR, "#expansion .chip-expansion") and chips
            plan = driver.find_element(By.ID, "plan-body").text
            assert re.search(r"fusion plan for dense\+sparse\+bm25", plan), plan
            assert driver.find_element(By.ID, "status").text.startswith("10 hits")
            driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    assert 0 < os.path.getsize(shot) < 300_000


@pytest.fixture(scope="module")
def adi_tiny(tmp_path_factory, tiny_model):
    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found (set ALIGNIR_SHARED)")
    from alignir.retrieval.indexer import build_index

    root = tmp_path_factory.mktemp("adi-tiny")
    build_index(ADI, root / "idx", model="tiny", loaded=tiny_model, cache_dir=root / "cache", progress=False,
                store_text=True)
    return root / "idx"


def test_page_in_chromium_tiny_model(adi_tiny, tiny_model, tmp_path):
    _check_page(adi_tiny, tiny_model, tmp_path / "page.png", aligned_words=False)


@pytest.mark.model
def test_page_in_chromium_smollm2(tmp_path_factory, smollm2):
    """ADI with SmolLM2 and its texts stored (the screenshot of the docs)."""
    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found (set ALIGNIR_SHARED)")
    _driver().quit()  # skip before indexing when the browser is missing
    from alignir.retrieval.indexer import build_index

    root = tmp_path_factory.mktemp("adi-page")
    build_index(ADI, root / "idx", model="smollm2-135m", loaded=smollm2, progress=False, store_text=True,
                cache_dir=root / "cache")
    _check_page(root / "idx", smollm2, os.environ.get("ALIGNIR_SCREENSHOT") or root / "page.png", aligned_words=True)
