"""The report's interactive parts without a browser: the CSP allows exactly the one inline script
by its hash, tables are marked for sorting/filtering, long texts fold, ids do not wrap, links
point only at anchors ctxleak made, and the leak map escapes its tokens."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from ctxleak.report import Link, Report
from ctxleak.report.interactive import LONG_TEXT, SCRIPT

PAYLOAD = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def _csp(page: str) -> str:
    m = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert m is not None
    return m.group(1)


def test_csp_allows_only_the_page_script_by_hash() -> None:
    r = Report("t")
    r.add_table([{"id": PAYLOAD, "x": 1.0}, {"id": "b", "x": 2.0}])
    page = r.render()
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert scripts == [SCRIPT]
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    directives = dict(d.strip().split(" ", 1) for d in _csp(page).split(";"))
    assert directives["script-src"] == f"'sha256-{digest}'"
    assert directives["default-src"] == "'none'" and directives["img-src"] == "data:"
    assert "unsafe-inline" not in directives["script-src"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" \
        in page


def test_tables_are_interactive_with_sort_values_and_a_filter_box() -> None:
    r = Report("t")
    r.add_table([{"id": f"ex-{i}", "influence": 1.0 / (i + 1)} for i in range(9)])
    r.add_table([{"id": "only", "influence": 0.5}])  # one row: nothing to sort
    page = r.render()
    assert page.count('<table class="interactive">') == 1
    assert page.count('class="filter"') == 1 and ">9 rows<" in page
    # the full value for sorting, 4 digits on screen
    assert '<td class="num" data-v="0.3333333333333333">0.3333</td>' in page
    assert '<td class="id">ex-3</td>' in page  # ids never wrap (white-space:nowrap)
    assert "td.id{white-space:nowrap}" in page


def test_long_text_folds_after_more_and_keeps_all_text_escaped() -> None:
    text = "word " * 100 + PAYLOAD
    r = Report("t")
    r.add_table([{"text": text}, {"text": "short"}])
    page = r.render()
    cell = re.search(r'<td class="long">(.*?)</td>', page, flags=re.S).group(1)
    shown, rest = cell.split('<details class="more"><summary>more</summary>')
    assert len(shown) <= LONG_TEXT
    assert rest.endswith("</details>")
    assert "&lt;script&gt;" in rest and "<script>alert" not in page
    assert "<td>short</td>" in page


def test_link_cells_point_at_generated_anchors_only() -> None:
    r = Report("t")
    r.add_table([{"example": Link("e1 <b>", "ex-1"), "v": 1}, {"example": Link("e2", "ex-2"),
                                                                "v": 2}])
    assert '<a href="#ex-1">e1 &lt;b&gt;</a>' in r.render()
    for bad in ('x" onclick="alert(1)', "javascript:alert(1)", "1ex", ""):
        with pytest.raises(ValueError):
            Link("t", bad)


def test_leak_map_colours_both_sides_and_escapes_tokens() -> None:
    r = Report("t")
    r.add_leak_map("ex-0", "example <0>", ["The", " secret", PAYLOAD], [0.5, 2.0, None],
                   ["A", " secret"], [0.1, 0.4], note="n-grams of 2")
    page = r.render()
    section = re.search(r'<section class="leakmap" id="ex-0">(.*?)</section>', page,
                        flags=re.S).group(1)
    assert "example &lt;0&gt;" in section and "<script>alert" not in section
    titles = re.findall(r'title="([^"]*)"', section)
    assert titles == ["0.5", "2", "\u2014", "0.1", "0.4"]  # hover values, None as a dash
    alphas = [float(a) for a in re.findall(r"rgba\(214,39,40,([0-9.]+)\)", section)]
    assert alphas == [0.25, 1.0, 0.0, 0.25, 1.0]  # each side on its own scale
    with pytest.raises(ValueError):
        r.add_leak_map('x"><script>', "t", ["a"], [1.0], ["b"], [1.0])
    with pytest.raises(ValueError):
        r.add_leak_map("ex-1", "t", ["a", "b"], [1.0], ["b"], [1.0])


def test_leak_map_redacts_pii_on_both_sides() -> None:
    r = Report("t", redact=True)
    r.add_leak_map("ex-0", "mail bob@example.net", ["Mail", " bob", "@", "example", ".net"],
                   [0.1] * 5, [" bob", "@example.net", " ok"], [0.2] * 3)
    page = r.render()
    assert "bob@" not in page and "example.net" not in page
    assert page.count("[REDACTED]") == 3  # title, context, response
    assert page.count('class="tok"') == 8  # token count kept: values stay aligned
