"""Tests for ctxleak.report: escaping (SPEC §9), embedding, atomic save, plots, redaction."""

from __future__ import annotations

import base64
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ctxleak.errors import OutputError
from ctxleak.report import Report, plots, redact_text
from ctxleak.report.html import redaction_spans
from ctxleak.report.interactive import SCRIPT

PNG = b"\x89PNG\r\n\x1a\n"
EVIL = "<script>alert(1)</script>"
QUOTES = "\"double\" 'single' & amp"
PAYLOAD = EVIL + ' "><img src=x onerror=alert(2)> ' + QUOTES


def _tiny_png() -> bytes:
    return plots.bar_plot(["a"], [1.0], title="t", ylabel="y")


def _assert_safe(out: str) -> None:
    assert out.lower().count("<script") == 1  # only the hashed one
    assert f"<script>{SCRIPT}</script>" in out
    assert "<img src=x" not in out
    assert '"double"' not in out and "'single'" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert "&quot;double&quot;" in out and "&#x27;single&#x27;" in out


# --------------------------------------------------------------------------- escaping

@pytest.mark.parametrize("method", ["title", "subtitle", "heading", "text", "kv_key", "kv_value",
                                    "table_dict", "table_headers", "table_caption", "image",
                                    "heatmap_token", "heatmap_caption", "details_summary",
                                    "details_text"])
def test_every_add_method_escapes(method: str) -> None:
    r = Report("Safe title", "safe subtitle")
    if method == "title":
        r = Report(PAYLOAD)
    elif method == "subtitle":
        r = Report("t", PAYLOAD)
    elif method == "heading":
        r.add_heading(PAYLOAD)
    elif method == "text":
        r.add_text(PAYLOAD)
    elif method == "kv_key":
        r.add_kv({PAYLOAD: 1})
    elif method == "kv_value":
        r.add_kv({"k": PAYLOAD}, caption=PAYLOAD)
    elif method == "table_dict":
        r.add_table([{PAYLOAD: PAYLOAD, "x": 1.0}], caption=PAYLOAD)
    elif method == "table_headers":
        r.add_table([[PAYLOAD, 2]], headers=[PAYLOAD, "n"])
    elif method == "table_caption":
        r.add_table([{"a": 1}], caption=PAYLOAD)
    elif method == "image":
        r.add_image(_tiny_png(), caption=PAYLOAD)
    elif method == "heatmap_token":
        r.add_token_heatmap(["ok", PAYLOAD, "\n"], [0.1, 0.5, 0.2])
    elif method == "heatmap_caption":
        r.add_token_heatmap(["a"], [1.0], caption=PAYLOAD)
    elif method == "details_summary":
        r.add_details(PAYLOAD, "body")
    elif method == "details_text":
        r.add_details("s", PAYLOAD)
    _assert_safe(r.render())


def test_page_is_self_contained() -> None:
    r = Report("t")
    r.add_text("see http://example.com")
    r.add_image(_tiny_png())
    out = r.render()
    assert out.count("<script") == 1 and "<link" not in out
    assert not re.search(r'(src|href)="(?!data:)', out)
    assert "Content-Security-Policy" in out


# --------------------------------------------------------------------------- tables

def test_table_formats_floats_and_none() -> None:
    r = Report("t")
    r.add_table([{"a": 3.14159265, "b": None, "c": 7}, {"a": 1e-7, "c": True}])
    out = r.render()
    assert ">3.142<" in out and ">1e-07<" in out and ">7<" in out and ">True<" in out
    assert out.count(">\u2014<") == 2  # None and the missing key "b" in row 2
    r2 = Report("t")
    r2.add_table([[0.123456, None]], headers=["x", "y"])
    r2.add_kv({"eps": 2.718281828, "missing": None})
    out2 = r2.render()
    assert ">0.1235<" in out2 and ">2.718<" in out2 and out2.count(">\u2014<") == 2


def test_table_row_length_mismatch() -> None:
    with pytest.raises(ValueError):
        Report("t").add_table([[1, 2, 3]], headers=["a", "b"])


# --------------------------------------------------------------------------- images

def test_image_embedded_as_png_data_uri() -> None:
    png = _tiny_png()
    r = Report("t")
    r.add_image(png, caption="fig")
    m = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', r.render())
    assert m is not None
    decoded = base64.b64decode(m.group(1), validate=True)
    assert decoded.startswith(PNG) and decoded == png


def test_image_rejects_non_png() -> None:
    with pytest.raises(ValueError):
        Report("t").add_image(b"<svg onload=alert(1)>")


# --------------------------------------------------------------------------- save

def test_save_is_atomic_and_complete(tmp_path: Path) -> None:
    r = Report("t")
    r.add_text("x" * 100_000)
    target = tmp_path / "report.html"
    target.write_text("old partial content")
    with pytest.raises(OutputError, match="already exists"):
        r.save(target)  # a file ctxleak was not asked to replace
    assert target.read_text() == "old partial content"
    assert r.save(target, overwrite=True) == target
    assert target.read_text(encoding="utf-8") == r.render()
    assert target.read_text(encoding="utf-8").rstrip().endswith("</html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temp file left
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_save_private_mode(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    Report("t").save(target, mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_save_failure_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(src: object, dst: object) -> None:
        raise OSError("disk full")

    target = tmp_path / "r.html"
    target.write_text("previous")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        Report("t").save(target, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    assert target.read_text() == "previous"


# --------------------------------------------------------------------------- token heatmap

def test_token_heatmap_one_span_per_token() -> None:
    tokens = ["Hello", " world", "\n", "\t<b>", " ", "", "x\ny", "end"]
    scores = [0.0, 0.5, -0.25, 1.0, float("nan"), 0.1, 2.0, None]
    r = Report("t")
    r.add_token_heatmap(tokens, scores, caption="cap")
    out = r.render()
    spans = re.findall(r'<span class="tok" style="background-color:rgba\(([\d,]+),([\d.]+)\)" '
                       r'title="([^"]*)">', out)
    assert len(spans) == len(tokens)
    assert out.count("<span") == len(tokens)
    assert [float(a) for _, a, _ in spans] == [0.0, 0.25, 0.125, 0.5, 0.0, 0.05, 1.0, 0.0]
    assert spans[1][2] == "0.5" and spans[2][0] == "31,119,180"  # negative → blue
    assert "\u21b5" in out and "\u2192" in out  # newline and tab made visible
    assert "&lt;b&gt;" in out and "<b>" not in out


def test_token_heatmap_vmax_and_length_check() -> None:
    r = Report("t")
    r.add_token_heatmap(["a", "b"], [1.0, 4.0], vmax=2.0)
    alphas = re.findall(r"rgba\([\d,]+,([\d.]+)\)", r.render())
    assert alphas == ["0.500", "1.000"]
    with pytest.raises(ValueError):
        r.add_token_heatmap(["a"], [1.0, 2.0])


# --------------------------------------------------------------------------- redaction

def test_redact_email_phone_and_date() -> None:
    text = "Mail jane.doe+x@example.com or call (555) 010-1234 on 2024-05-01."
    out = redact_text(text)
    assert "jane.doe" not in out and "example.com" not in out
    assert "555" not in out and "010-1234" not in out
    assert "2024-05-01" not in out  # a date is personal data too (leave, birth, hire dates)
    assert out == "Mail [REDACTED] or call [REDACTED] on [REDACTED]."


@pytest.mark.parametrize("phone", ["555-010-1234", "+1 555.010.1234", "+44 20 7946 0958",
                                   "5550101234", "(020) 7946 0958"])
def test_redact_phone_formats(phone: str) -> None:
    assert redact_text(f"tel {phone}.") == "tel [REDACTED]."


@pytest.mark.parametrize("keep", ["in 2023 we had 1500 users",
                                  "version 3.11.2", "pi is 3.14159", "id 12345"])
def test_redact_leaves_non_pii(keep: str) -> None:
    assert redact_text(keep) == keep


def test_redact_spans_and_patterns_flag() -> None:
    text = "Alice Smith lives at 1 Main St, alice@example.org"
    assert redact_text(text, spans=[(0, 11)], patterns=False) == (
        "[REDACTED] lives at 1 Main St, alice@example.org")
    assert redact_text(text, spans=[(0, 5), (3, 11)]) == (
        "[REDACTED] lives at 1 Main St, [REDACTED]")
    assert redact_text(text, patterns=[r"\d+ Main St"]) == (
        "Alice Smith lives at [REDACTED], alice@example.org")
    with pytest.raises(ValueError):
        redact_text("abc", spans=[(2, 10)])
    assert redaction_spans("a@b.co x") == [(0, 6)]


def test_report_redact_mode() -> None:
    r = Report("Run for jane.doe+x@example.com", redact=True)
    r.add_text("call (555) 010-1234")
    r.add_table([{"email": "bob@example.net", "n": 3}])
    r.add_kv({"phone": "555-010-1234"})
    r.add_details("ctx", "write to bob@example.net")
    r.add_token_heatmap(["Mail", " bob", "@", "example", ".net", " now"], [0.1] * 6)
    out = r.render()
    for secret in ("jane.doe", "010-1234", "bob@", "example.net", "> bob<"):
        assert secret not in out
    assert out.count("[REDACTED]") >= 6
    assert out.count('<span class="tok"') == 6  # token count kept


# --------------------------------------------------------------------------- plots

def _all_plots() -> dict[str, bytes]:
    return {
        "line": plots.line_plot({"a": ([1, 2, 4], [0.1, 0.2, 0.4]), "b <x>": ([1, 2], [1, 2])},
                                title="t $x_1", xlabel="x", ylabel="y", logx=True, logy=True,
                                errors={"a": [0.01, 0.02, 0.5]}),
        "line_empty": plots.line_plot({}, title="t", xlabel="x", ylabel="y"),
        "scatter": plots.scatter_plot([1, 2, 3], [1.1, 2.2, 2.9], labels=["o", "c", "o"],
                                      title="t", xlabel="x", ylabel="y", diagonal=True),
        "scatter_plain": plots.scatter_plot([], [], title="t", xlabel="x", ylabel="y"),
        "bar": plots.bar_plot(["a", "b"], [1.0, 2.0], title="t", ylabel="y", errors=[0.1, 0.2]),
        "density": plots.density_plot({"kde": [0.1, 0.5, 0.4, 0.9], "one": [0.3, 0.3],
                                       "empty": [], "single": [1.0]}, title="t", xlabel="x"),
        "density_hist_only": plots.density_plot({"c": [2.0]}, title="t", xlabel="x"),
        "heatmap": plots.heatmap_plot([[1.0, float("nan")], [0.5, 2.0]], row_labels=["r1", "r2"],
                                      col_labels=["c1", "c2"], title="t"),
    }


def test_plots_return_png_bytes() -> None:
    for name, png in _all_plots().items():
        assert isinstance(png, bytes), name
        assert png.startswith(PNG), name
        assert len(png) > 1000, name


def test_plots_deterministic() -> None:
    a = plots.line_plot({"s": ([0, 1, 2], [3, 1, 2])}, title="t", xlabel="x", ylabel="y")
    b = plots.line_plot({"s": ([0, 1, 2], [3, 1, 2])}, title="t", xlabel="x", ylabel="y")
    assert a == b
    d1 = plots.density_plot({"a": [1, 2, 2, 3]}, title="t", xlabel="x")
    d2 = plots.density_plot({"a": [1, 2, 2, 3]}, title="t", xlabel="x")
    assert plots.density_plot({"a": [1, 2, 2, 3]}, title="t", xlabel="x", means=False) != d1
    assert d1 == d2


def test_plots_validate_shapes() -> None:
    with pytest.raises(ValueError):
        plots.line_plot({"a": ([1, 2], [1])}, title="t", xlabel="x", ylabel="y")
    with pytest.raises(ValueError):
        plots.bar_plot(["a"], [1, 2], title="t", ylabel="y")
    with pytest.raises(ValueError):
        plots.heatmap_plot([[1, 2]], row_labels=["r"], col_labels=["c"], title="t")


def test_import_does_not_load_matplotlib() -> None:
    code = ("import sys, ctxleak, ctxleak.report, ctxleak.report.plots; "
            "print(sorted(m for m in ('matplotlib', 'scipy', 'torch') if m in sys.modules))")
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert res.stdout.strip() == "[]"


def test_plotting_does_not_change_global_backend() -> None:
    import matplotlib

    before = matplotlib.get_backend()
    _tiny_png()
    assert matplotlib.get_backend() == before


def test_plot_labels_are_literal_text() -> None:
    # Mathtext would raise on an unknown command; user labels must be drawn as plain text.
    bad = r"$\notacommand{x}$ costs $5 and \$10"
    assert plots.line_plot({bad: ([1, 10], [1, 100]), "_hidden": ([1, 2], [3, 4])}, title=bad,
                           xlabel=bad, ylabel=bad, logx=True, logy=True).startswith(PNG)
    assert plots.bar_plot([bad], [1.0], title=bad, ylabel=bad).startswith(PNG)
    assert plots.heatmap_plot([[1.0]], row_labels=[bad], col_labels=[bad], title=bad).startswith(PNG)
    assert plots.scatter_plot([1], [2], labels=[bad], title=bad, xlabel=bad, ylabel=bad,
                              diagonal=True).startswith(PNG)
    assert plots.density_plot({bad: [1, 2, 3]}, title=bad, xlabel=bad).startswith(PNG)
