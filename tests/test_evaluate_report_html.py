"""report.html: report.md as one self-contained page. Its rendering (embedded images, no markup from a result's
text, nothing fetched), and the page of a real comparison opened in headless Chromium (tests/browser/): a
screenshot that shows the plots, the report's sections and tables, no console error, no request but the page."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from evaluate import compare
from evaluate.comparison.html import page
from evaluate.history.__main__ import main as history
from tests.browser.chromium import Chromium, missing

RESULTS = Path(__file__).parent / "fixtures" / "results"
PNG_1PX = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a5f1e3a40000000049454e44ae426082")


def test_the_page_embeds_the_reports_images_and_says_which_it_cannot(tmp_path):
    (tmp_path / "compare.png").write_bytes(PNG_1PX)
    html = page("# R\n\n![plot](compare.png)\n\n![gone](history.png)\n\n![far](http://example.com/x.png)\n", tmp_path)
    assert '<img src="data:image/png;base64,' in html and 'alt="plot"' in html
    assert "[gone: history.png is not embedded in this page]" in html
    assert "[far: http://example.com/x.png is not embedded in this page]" in html
    assert "http://example.com/x.png\"" not in html  # named as text, never a source to fetch


def test_a_results_text_is_text_in_the_page_never_markup(tmp_path):
    html = page("# R\n\n<script>alert(1)</script>\n\n| run |\n|---|\n| <img src=x onerror=alert(2)> |\n", tmp_path)
    assert "<script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<table>" in html


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    """report.html of the fixture AMD and NVIDIA sets, with the History of a store holding both."""
    out = tmp_path_factory.mktemp("compare")
    store = out / "history.sqlite"
    assert history(["add", str(RESULTS / "amd"), str(RESULTS / "nvd"), "--db", str(store)]) == 0
    assert compare.main([str(RESULTS / "amd"), str(RESULTS / "nvd"), "--history", str(store), "-o", str(out)]) == 0
    return out / "report.html"


def test_compare_writes_report_html_beside_report_md_with_the_same_sections(report_page):
    sections = re.findall(r"^## (.+)$", (report_page.parent / "report.md").read_text(), flags=re.M)
    html = report_page.read_text()
    assert {"Results", "History", "Fairness"} <= set(sections)
    assert re.findall(r"<h2>(.+?)</h2>", html) == sections
    assert html.count("data:image/png;base64,") == 2  # compare.png and history.png


@pytest.fixture(scope="module")
def browser():
    why = missing()
    if why:
        pytest.skip(why)
    chromium = Chromium()
    yield chromium
    chromium.close()


PAGE_FACTS = {
    "title": "document.title",
    "h2": "[...document.querySelectorAll('h2')].map(h => h.textContent)",
    "tables": "document.querySelectorAll('table').length",
    "images": "[...document.images].map(i => [i.alt, i.complete, i.naturalWidth, i.getBoundingClientRect().width])",
}


def test_report_html_opens_in_chromium_with_its_plots_and_no_error(browser, report_page):
    import matplotlib.image

    visit = browser.visit(report_page, PAGE_FACTS)
    facts = visit.values
    assert facts["title"] == "TPrimat comparison"
    assert {"Results", "History", "Fairness"} <= set(facts["h2"]) and facts["tables"] >= 5
    assert sorted(alt for alt, *_ in facts["images"]) == ["comparison", "history"]
    assert all(complete and natural > 100 and shown > 100 for _, complete, natural, shown in facts["images"])
    assert visit.console_errors == []
    fetched = [url for url in visit.fetched if not url.startswith("data:")]  # the embedded images are data URIs
    assert fetched == [report_page.resolve().as_uri()]  # the page itself, nothing else: self-contained
    shot = matplotlib.image.imread(io.BytesIO(visit.screenshot_png), format="png")
    assert shot.shape[1] >= 1200 and shot.shape[0] >= 2000
    rgb = shot[..., :3]
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25  # the plots' bars and lines; text is grey
    assert coloured.mean() > 0.01, "the screenshot shows no plot"


def test_the_browser_check_sees_a_console_error_and_a_fetch(browser, tmp_path):
    """The checks above can fail: a page that logs an error and fetches an image is caught on both counts."""
    bad = tmp_path / "bad.html"
    bad.write_text('<img src="http://127.0.0.1:9/x.png"><script>console.error("boom")</script>')
    visit = browser.visit(bad, {})
    assert "boom" in visit.console_errors
    assert "http://127.0.0.1:9/x.png" in visit.fetched
