"""Every command's report, and a compare report, from tiny runs, loaded in headless Chromium:
no console errors or CSP violations, every image loads, clicking a header sorts its table, the
filter box hides rows, and only the hashed script runs (a script/onerror payload in the data
never executes). Screenshots go to ``$CTXLEAK_SCREENSHOTS`` (or the test's temporary folder).

Skipped, with the reason, where Chromium or ``websocket-client`` is missing
(``scripts/setup.sh --dev`` installs both where it can)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path

import pytest
from helpers.cdp import Browser, find_chromium
from helpers.tiny_data import icl_keywords, write_command_data

import ctxleak
from ctxleak.report import Report
from ctxleak.report.interactive import SCRIPT, SCRIPT_HASH

pytest.importorskip("websocket", reason="websocket-client is not installed (pip install "
                    "websocket-client, or scripts/setup.sh --dev)")
CHROMIUM = find_chromium()
# headless Chromium is a real part met in the integration tier
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get "
                                 "install chromium, or scripts/setup.sh --dev)")]

# would set window.pwned if any of it ran
PAYLOAD = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


@pytest.fixture(scope="module")
def browser():
    b = Browser(CHROMIUM)
    yield b
    b.close()


@pytest.fixture(scope="module")
def shots_dir(tmp_path_factory) -> Path:
    env = os.environ.get("CTXLEAK_SCREENSHOTS")
    return Path(env) if env else tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def reports(tmp_path_factory, tiny_dir, gpt2_lm) -> dict[str, Path]:
    """One tiny run of every command (and a compare of two models), by name -> report.html."""
    root = write_command_data(tmp_path_factory.mktemp("browser-runs"), 4,
                              contexts=["the capital of france is paris .",
                                        "rome is the capital of italy and a city ."],
                              payload=PAYLOAD)
    docs = root / "docs.jsonl"
    common = dict(seed=3, progress=False)
    influence = dict(lambda_=[0.5, 1.0], max_new_tokens=4, ngram=2, stride=1)
    runs = {
        "influence": ctxleak.influence(tiny_dir, str(docs), output=str(root / "influence"),
                                       **influence, **common),
        "influence-gpt2": ctxleak.influence(gpt2_lm, str(docs), output=str(root / "gpt2"),
                                            **influence, **common),
        "explain": ctxleak.influence_explain(tiny_dir, "the capital of france is paris .",
                                             f"what is the capital ? {PAYLOAD}",
                                             max_new_tokens=4, ngram=2,
                                             output=str(root / "explain"), seed=3),
        "icl": ctxleak.iclinf(tiny_dir, str(root / "train.jsonl"),
                              test_data=str(root / "test.jsonl"), shots=[1, 2], queries=3,
                              calibration="both", output=str(root / "icl"), **icl_keywords(),
                              **common),
        "audit": ctxleak.audit(tiny_dir, "demo", subset_size=3, sequences=2, max_new_tokens=4,
                               target_eps=[1, 100], output=str(root / "audit"), **common),
        "susceptibility": ctxleak.susceptibility(tiny_dir, str(root / "rel.json"), contexts=4,
                                                 limit=3, output=str(root / "susc"), **common),
        "probe": ctxleak.probe(tiny_dir, str(root / "records.jsonl"), pii="phone", limit=3,
                               mode="black-box,in-context", output=str(root / "probe"),
                               **common),
        "canary": ctxleak.canary_audit(tiny_dir, [{"id": "p", "context": f"a note {PAYLOAD}"}],
                                       bounded_eps=1.0, trials=4, max_new_tokens=3,
                                       output=str(root / "canary"), **common),
    }
    out = {name: r.path / "report.html" for name, r in runs.items()}
    comp = ctxleak.compare([runs["influence"], runs["influence-gpt2"]],
                           output=root / "compare")
    out["compare"] = comp.path / "report.html"
    return out


def _check_page(browser: Browser, page: Path) -> dict:
    browser.open(page)
    return browser.evaluate("""(() => {
      const scripts = Array.from(document.scripts).map(s => s.textContent);
      const images = Array.from(document.images).map(
          i => ({ok: i.complete && i.naturalWidth > 0, data: i.src.startsWith('data:')}));
      return {pwned: typeof window.pwned, scripts, images,
              maps: document.querySelectorAll('section.leakmap').length,
              js: document.documentElement.classList.contains('js'),
              tables: document.querySelectorAll('table.interactive').length};
    })()""")


SORT = """(() => {
  const rows = t => Array.from(t.tBodies[0].rows).map(r => r.textContent);
  for (const t of document.querySelectorAll('table.interactive')) {
    const ths = t.tHead.rows[0].cells;
    for (let c = 0; c < ths.length; c++) {
      const before = rows(t).join('\\u0001');
      ths[c].click();
      if (rows(t).join('\\u0001') !== before) {
        return {col: c, dir: ths[c].getAttribute('aria-sort'),
                values: Array.from(t.tBodies[0].rows).map(r => {
                  const td = r.cells[c]; const v = td.getAttribute('data-v');
                  return v !== null ? v : td.textContent.trim(); })};
      }
    }
  }
  return null;
})()"""


@pytest.mark.parametrize("name", ["influence", "explain", "icl", "audit", "susceptibility",
                                  "probe", "canary", "compare"])
def test_report_in_chromium(name, reports, browser, shots_dir):
    state = _check_page(browser, reports[name])
    browser.screenshot(shots_dir / f"{name}.png")
    assert browser.errors() == []
    # only the hashed script is in the page, and it ran; the payload did not
    assert state["scripts"] == [SCRIPT] and state["js"]
    digest = base64.b64encode(hashlib.sha256(state["scripts"][0].encode()).digest()).decode()
    assert SCRIPT_HASH == f"sha256-{digest}"
    assert state["pwned"] == "undefined"
    # the leak maps: one per example and setting, one in explain, up to 3 in-context probes
    assert state["maps"] == {"influence": 4, "explain": 1, "probe": 3}.get(name, 0)
    # every image is an embedded PNG that decoded (the canary audit's page is tables only)
    assert bool(state["images"]) == (name != "canary")
    assert all(i["ok"] and i["data"] for i in state["images"])
    # clicking a header sorts: the order changes, ascending by the column's values
    assert state["tables"] >= 1
    sort = browser.evaluate(SORT)
    assert sort is not None and sort["dir"] == "ascending"
    try:
        numbers = [float(v) for v in sort["values"]]
    except ValueError:
        numbers = None
    if numbers is not None:
        assert numbers == sorted(numbers)
    assert browser.errors() == []


def test_influence_leak_map_links_and_filter(reports, browser, shots_dir):
    browser.open(reports["influence"])
    info = browser.evaluate("""(() => {
      const links = Array.from(document.querySelectorAll('a[href^="#ex-"]'));
      const targets = links.map(a => !!document.getElementById(a.getAttribute('href').slice(1)));
      const maps = document.querySelectorAll('section.leakmap');
      const toks = maps.length ? maps[0].querySelectorAll('.tokens')[0].querySelectorAll('span.tok')
                               : [];
      return {links: links.length, targets, maps: maps.length,
              titled: Array.from(toks).every(s => s.title !== ''), tokens: toks.length};
    })()""")
    assert info["maps"] == 4  # 2 examples x 2 settings
    assert info["links"] >= 4 and all(info["targets"])
    assert info["tokens"] > 0 and info["titled"]  # every context token has its value on hover
    browser.evaluate("document.getElementById('ex-0').scrollIntoView()")
    browser.screenshot(shots_dir / "influence_leakmap.png")
    # a real mouse click on the ranked table's "influence" header sorts it ascending, a second
    # click descending
    column = """Array.from(document.querySelector('table.interactive').tBodies[0].rows)
                .map(r => Number(r.cells[2].getAttribute('data-v')))"""
    before = browser.evaluate(column)
    assert before == sorted(before, reverse=True)  # ranked: most influence first
    browser.click("table.interactive thead th:nth-child(3)")
    assert browser.evaluate(column) == sorted(before)
    browser.click("table.interactive thead th:nth-child(3)")
    assert browser.evaluate(column) == sorted(before, reverse=True)
    # the filter box hides the rows without its text
    shown = browser.evaluate("""(() => {
      const box = document.querySelector('input.filter');
      if (!box) return null;
      const table = box.parentNode.querySelector('table');
      box.value = 'zzz-no-such-text'; box.dispatchEvent(new Event('input'));
      const hidden = Array.from(table.tBodies[0].rows).filter(r => r.hidden).length;
      box.value = ''; box.dispatchEvent(new Event('input'));
      return [hidden, table.tBodies[0].rows.length,
              Array.from(table.tBodies[0].rows).filter(r => r.hidden).length];
    })()""")
    if shown is not None:
        assert shown[0] == shown[1] and shown[2] == 0


def test_harness_sees_a_script_the_csp_blocks(browser, tmp_path):
    """The checks above can fail: an inline script without the hash is blocked and reported."""
    page = Report("t").render().replace("</body>", "<script>window.pwned=3</script></body>")
    path = tmp_path / "evil.html"
    path.write_text(page)
    browser.open(path)
    assert browser.evaluate("typeof window.pwned") == "undefined"
    errors = browser.errors()
    assert any("script-src" in e for e in errors), errors
    assert re.search(r"csp: script-src", "\n".join(errors))


VERDICT = """(() => {
  const v = document.getElementById('verdict');
  if (!v) return null;
  const r = v.getBoundingClientRect();
  const h2 = document.querySelector('h2');
  const tables = Array.from(document.querySelectorAll('table'));
  return {top: r.top, height: r.height, inner: window.innerHeight,
          text: v.querySelector('.verdict-text').textContent,
          rule: (v.querySelector('.verdict-rule') || {}).textContent || '',
          beforeSections: !h2 || r.bottom <= h2.getBoundingClientRect().top,
          beforeTables: tables.every(t => r.bottom <= t.getBoundingClientRect().top)};
})()"""


@pytest.mark.parametrize("name", ["icl", "audit", "susceptibility", "probe"])
def test_verdict_is_visible_at_the_top(name, reports, browser, shots_dir):
    browser.open(reports[name])
    v = browser.evaluate(VERDICT)
    browser.screenshot(shots_dir / f"{name}_verdict.png")
    assert v is not None, "no verdict on the page"
    # in the first screen, above every section and table, with its sentence and its rule
    assert 0 <= v["top"] and v["top"] + v["height"] <= v["inner"] and v["height"] > 0
    assert v["beforeSections"] and v["beforeTables"]
    assert v["text"].startswith("Verdict: ") and len(v["text"]) > 20
    assert v["rule"].startswith("Rule: ")


FITS = """(() => {
  const root = document.documentElement;
  const wide = Array.from(document.querySelectorAll('table')).filter(
      t => t.getBoundingClientRect().right > root.clientWidth + 0.5).map(
      t => (t.tHead ? t.tHead.textContent : t.textContent).slice(0, 80));
  const scrolls = Array.from(document.querySelectorAll('.tablewrap')).filter(
      w => w.scrollWidth > w.clientWidth + 1).length;
  return {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, wide, scrolls};
})()"""


@pytest.mark.parametrize("name", ["influence", "explain", "icl", "audit", "susceptibility",
                                  "probe", "canary", "compare"])
def test_no_sideways_scroll_at_1400_px(name, reports, browser, shots_dir):
    browser.send("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                 deviceScaleFactor=1, mobile=False)
    try:
        browser.open(reports[name])
        fit = browser.evaluate(FITS)
        browser.screenshot(shots_dir / f"{name}_1400.png", full_page=True)
    finally:
        browser.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                     deviceScaleFactor=1, mobile=False)
    assert fit["scrollWidth"] <= fit["clientWidth"], fit
    assert fit["wide"] == [] and fit["scrolls"] == 0, fit  # every table (and column) on screen


def test_the_harness_sees_a_table_too_wide(browser, tmp_path):
    """The width check above can fail: an unbreakable cell wider than the page is caught."""
    page = Report("t")
    page.add_table([{"a": 1, "b": 2}, {"a": 3, "b": 4}])
    html = page.render().replace("</body>", '<div style="width:3000px">x</div></body>')
    (tmp_path / "wide.html").write_text(html)
    browser.send("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                 deviceScaleFactor=1, mobile=False)
    try:
        browser.open(tmp_path / "wide.html")
        fit = browser.evaluate(FITS)
    finally:
        browser.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                     deviceScaleFactor=1, mobile=False)
    assert fit["scrollWidth"] > fit["clientWidth"]


@pytest.mark.parametrize("name", ["influence", "probe"])
def test_report_prints_to_pdf(name, reports, browser, tmp_path):
    """``chromium --print-to-pdf`` gives a non-empty PDF; under print media the filter boxes
    are hidden and the page fits an A4 width."""
    pdf = tmp_path / f"{name}.pdf"
    import subprocess

    subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}",
                    reports[name].resolve().as_uri()], check=True, timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-") and len(data) > 10_000
    assert re.search(rb"/Type\s*/Page\b", data)
    browser.send("Emulation.setEmulatedMedia", media="print")
    browser.send("Emulation.setDeviceMetricsOverride", width=794, height=1123,
                 deviceScaleFactor=1, mobile=False)  # A4 at 96 dpi
    try:
        browser.open(reports[name])
        state = browser.evaluate("""(() => ({
          filters: Array.from(document.querySelectorAll('input.filter')).filter(
              e => getComputedStyle(e).display !== 'none').length,
          scrollWidth: document.documentElement.scrollWidth,
          clientWidth: document.documentElement.clientWidth}))()""")
    finally:
        browser.send("Emulation.setEmulatedMedia", media="")
        browser.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                     deviceScaleFactor=1, mobile=False)
    assert state["filters"] == 0
    assert state["scrollWidth"] <= state["clientWidth"], state
