"""The viewer in a real headless Chromium (Debian's chromium and chromium-driver through selenium), as a
user clicks through it: the runs page, the attempts filtered to failures, the episode of the known-bad
replay with its row diff and extra side effect, compare base vs trained with a flipped task and both of
its episodes, and the static export opened from disk with every link resolving. A screenshot of each
page goes to the test's folder (its tmp_path, printed).

The browser comes from scripts/browser_local.sh (installs the two Debian packages when missing and root;
nothing is downloaded at run time otherwise). Without it the tests skip with the script's reason;
TBX_REQUIRE_BROWSER=1 makes that a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.view.runs import served_run, stored_runs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _unavailable(reason: str) -> None:
    if os.environ.get("TBX_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def driver():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (it is in the dev extra: pip install -e '.[dev]')")
    found = subprocess.run(["bash", str(ROOT / "scripts" / "browser_local.sh")], capture_output=True, text=True,
                           timeout=900, check=False)
    if found.returncode != 0:
        _unavailable(f"no headless Chromium (scripts/browser_local.sh: {found.stderr.strip().splitlines()[-1:]})")
    chromium, chromedriver = found.stdout.split()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--hide-scrollbars"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(chromedriver), options=options)
    browser.implicitly_wait(5)
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    folder = tmp_path_factory.mktemp("browser-runs")
    return (*stored_runs(folder), served_run(folder / "served"))


@pytest.fixture(scope="module")
def viewer(runs):
    """`launch.py stage=view` in its own process, as a user starts it; yields its URL."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), "stage=view", f"runs=[{','.join(runs)}]",
                             "view.port=0", "view.page_size=4", "logger=none"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    try:
        assert " at http://127.0.0.1:" in line, line + proc.stdout.read() if proc.poll() is not None else line
        yield line.split(" at ")[1].split(";")[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def shot(driver, tmp_path: Path, name: str, element=None) -> Path:
    """The whole page (not only the window), or one element of it, as a PNG, through Chromium's DevTools."""
    import base64

    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1}
    if element is not None:
        box = driver.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                    "return [r.left + scrollX, r.top + scrollY, r.width, r.height];", element)
        clip = {"x": box[0] - 8, "y": box[1] - 8, "width": box[2] + 16, "height": box[3] + 16, "scale": 1}
    data = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})["data"]
    path = tmp_path / f"{name}.png"
    path.write_bytes(base64.b64decode(data))
    print(f"screenshot {path}")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def test_click_through_failures_episode_and_compare(driver, viewer, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(viewer)
    assert driver.find_element(By.CSS_SELECTOR, "#run-1 h2").text.startswith("trained")
    shot(driver, tmp_path, "runs")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#run-1 a.attempts-link"))
    assert "6 of 6 attempts" in driver.find_element(By.ID, "count").text
    Select(driver.find_element(By.ID, "outcome")).select_by_visible_text("failure")
    follow(driver, driver.find_element(By.ID, "apply"))
    assert driver.find_element(By.ID, "count").text == "2 of 6 attempts"
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.row")
    assert [r.get_attribute("class") for r in rows] == ["row failure", "row failure"]
    shot(driver, tmp_path, "attempts_failures")

    follow(driver, driver.find_element(By.CSS_SELECTOR, "a.episode-link"))
    side_effect = driver.find_element(By.CSS_SELECTOR, "table.rowdiff.side-effect")
    assert side_effect.find_element(By.CSS_SELECTOR, ".extra-mark").text == "extra side effect"
    changed = side_effect.find_element(By.CSS_SELECTOR, "tr.changed").text
    assert changed == "nickname ∅ oops"  # the write nobody asked for, on account 1
    assert len(driver.find_elements(By.CSS_SELECTOR, "table.rowdiff")) == 2  # what was asked, and the extra
    shot(driver, tmp_path, "episode")

    follow(driver, driver.find_element(By.ID, "nav-runs"))
    follow(driver, driver.find_element(By.CSS_SELECTOR, ".compare-links a"))
    flipped = driver.find_elements(By.CSS_SELECTOR, "tr.task-row.flipped")
    assert sorted(r.get_attribute("data-task") for r in flipped) == ["mock/transfer/20", "mock/transfer/5"]
    assert "2 of 3 shared tasks changed" in driver.find_element(By.ID, "flips").text
    assert "one row per run, one column per attempt" in driver.find_element(By.ID, "legend").text
    for row in flipped:  # base fails both attempts, trained passes both: a row each, not pairs
        grid = {r.get_attribute("data-run"): [c.get_attribute("class") for c in r.find_elements(By.CSS_SELECTOR, ".cell")]
                for r in row.find_elements(By.CSS_SELECTOR, "tr.run-row")}
        assert grid == {"base": ["cell failure"] * 2, "trained": ["cell success"] * 2}
        assert row.find_element(By.CSS_SELECTOR, "tr.numbers").text.split() == ["1", "2"]
    shot(driver, tmp_path, "compare")
    follow(driver, flipped[0].find_element(By.CSS_SELECTOR, "a.pair-link"))
    sides = driver.find_elements(By.CSS_SELECTOR, ".side")
    assert len(sides) == 2
    outcomes = [s.find_element(By.CSS_SELECTOR, "#outcome-value .outcome").text for s in sides]
    assert outcomes == ["failure", "success"]
    shot(driver, tmp_path, "pair")


def follow(driver, element) -> None:
    """Click a link or submit button and wait until the next page has replaced this one (a click returns
    before the browser has loaded the page it leads to)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(old))
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def _attempt_numbers(driver) -> list[str] | None:
    """The attempt column of the page's rows; None while the page is being replaced (the old rows go stale)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return [r.find_elements(By.TAG_NAME, "td")[3].text for r in driver.find_elements(By.CSS_SELECTOR, "tr.row")]
    except StaleElementReferenceException:
        return None


def test_a_failing_check_shows_what_the_row_holds(driver, runs, viewer, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from tbx.view.store import load_runs

    (base,) = load_runs(runs[:1], None)
    stored_cause = base.record("mock/transfer/5", 0).cause
    base.close()
    driver.get(viewer)
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#run-0 a.attempts-link"))  # base: the null agent
    driver.find_element(By.ID, "search").send_keys("transfer/5")
    follow(driver, driver.find_element(By.ID, "apply"))
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: _attempt_numbers(d) == ["1", "2"])  # the filtered page (attempts from 1)
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.row")
    cause = rows[0].find_element(By.CSS_SELECTOR, "td.cause")
    assert len(stored_cause) > 200 and cause.text == stored_cause  # whole, where 160 characters were shown
    assert cause.size["height"] > 3 * 16 and cause.size["width"] <= 540  # it wraps in its column
    follow(driver, rows[0].find_element(By.CSS_SELECTOR, "a.episode-link"))
    assert driver.find_element(By.TAG_NAME, "h1").text.endswith("attempt 1 · base")
    failing = [c for c in driver.find_elements(By.CSS_SELECTOR, ".check.fail") if "expected[0]" in c.text][0]
    header = [th.text for th in failing.find_elements(By.CSS_SELECTOR, "thead th")]
    assert header == ["column", "before", "after (terminal)", "expected"]
    assert failing.find_element(By.TAG_NAME, "caption").text == 'unchanged (terminal = before) accounts {"id": 1}'
    assert failing.find_element(By.CSS_SELECTOR, "tr.mismatch").text == "balance 100 100 95"
    shot(driver, tmp_path, "failing_check", driver.find_element(By.CSS_SELECTOR, "section.verdict"))


def test_unknown_cost_and_abandoned_attempts_on_the_runs_page(driver, viewer, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    driver.get(viewer)
    served = driver.find_element(By.ID, "run-2")
    header = [th.text for th in served.find_elements(By.CSS_SELECTOR, "thead th")]
    line = dict(zip(header, [td.text for td in served.find_elements(By.CSS_SELECTOR, "tr.all td")], strict=False))
    assert (line["abandoned"], line["tokens"], line["cost"]) == ("1", "n/a", "n/a")
    assert "$0" not in served.text
    shot(driver, tmp_path, "runs")


def test_the_export_opens_from_disk_and_its_links_resolve(driver, runs, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    site = tmp_path / "site"
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "stage=view", f"runs=[{runs[0]},{runs[1]}]",
                          f"view.export={site}", "view.page_size=4", "logger=none"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    driver.get((site / "index.html").as_uri())
    assert driver.find_element(By.CSS_SELECTOR, "#run-0 h2").text.startswith("base")
    pages, seen = [(site / "index.html").as_uri()], set()
    start = time.perf_counter()
    while pages:  # every page reachable from the index, and every link on it
        url = pages.pop()
        if url in seen:
            continue
        seen.add(url)
        driver.get(url)
        assert driver.find_elements(By.TAG_NAME, "main"), url
        for link in driver.find_elements(By.CSS_SELECTOR, "a[href], link[href], img[src]"):
            target = link.get_attribute("href") or link.get_attribute("src")
            assert target.startswith("file://"), (url, target)
            assert Path(unquote(urlparse(target).path)).is_file(), (url, target)
            if target.endswith(".html"):
                pages.append(target)
    assert len(seen) == len(list(site.glob("*.html"))), "a page no link reaches"
    print(f"{len(seen)} exported pages checked in {time.perf_counter() - start:.1f} s")
    driver.get((site / "run1-attempts-1.html").as_uri())
    shot(driver, tmp_path, "export_attempts")
