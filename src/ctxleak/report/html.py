"""A tiny builder for self-contained, escaped HTML reports.

Contexts and model outputs are untrusted: every piece of text given to :class:`Report` goes
through :func:`html.escape` (``quote=True``) before it is placed in the page. The page has inline
CSS only, images as ``data:`` URIs, no scripts and no external resources, and a Content Security
Policy that forbids all of them as a second line of defence.

:func:`redact_text` masks secrets and PII for commands run with ``--redact``, found by
:func:`ctxleak.sensitive.find_sensitive` (passwords, keys, PINs, ids, names, addresses,
e-mails, phone numbers, money amounts, dates, diagnoses), and given character spans; a report
applies it to all text through its :class:`~ctxleak.report.redaction.Redactor`
(:mod:`ctxleak.report.redaction`).
"""

from __future__ import annotations

import base64
import html
import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxleak.report import interactive
from ctxleak.report.interactive import Link
from ctxleak.report.redaction import (
    REDACTED,
    Redactor,
    redact_text,
    redaction_spans,
    redactor_for,
)
from ctxleak.run.atomic import refuse_replacing, write_atomic

#: Where a verdict's first sentence ends: a stop, then a capital (not "Def. 3.2").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MISSING = "\u2014"  # em dash, shown for None

# --------------------------------------------------------------------------- formatting

def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def format_value(value: Any) -> str:
    """Plain-text form of a table or key-value cell: floats to 4 significant digits, None as "—"."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:2em auto;max-width:1100px;padding:0 1em;color:#222;line-height:1.45}
h1{margin-bottom:.1em}.subtitle{color:#666;margin-top:0}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
p.text{white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top;
overflow-wrap:break-word}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption,.caption{color:#555;font-size:.9em;margin:.3em 0}
.tokens{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;
white-space:pre-wrap;overflow-wrap:anywhere;line-height:1.9;border:1px solid #eee;padding:.5em}
.tok{border-radius:2px}.ws{color:#999;font-style:normal}
details{margin:.6em 0}summary{cursor:pointer;font-weight:600}
details pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f8f8f8;padding:.6em}
footer.cite{margin-top:2.5em;border-top:1px solid #ddd;color:#444;font-size:.92em}
"""

_CSS += interactive.CSS
# The verdict first; tables that fit the page (cells wrap, never a sideways scroll); printing.
_CSS += """
.verdict{border-left:5px solid #b5471b;background:#fdf4ee;padding:.5em .9em;margin:1em 0}
.verdict p{margin:.3em 0}.verdict-text{font-size:1.08em;white-space:pre-line}
.verdict .label{font-weight:700}
.verdict-rule{color:#444;font-size:.92em}.verdict .tablewrap{margin:.4em 0}
.tablewrap{overflow-x:visible}.tablewrap table{max-width:100%}
td{overflow-wrap:anywhere}th{overflow-wrap:anywhere;hyphens:auto}td.id{white-space:normal;min-width:6ch}td.long{min-width:12em}
td.num{white-space:nowrap}th.sortable{white-space:normal}td.word{overflow-wrap:break-word}
details.table:not([open])>.tablewrap{display:none}details.table>.tablewrap{overflow-x:auto}
details.table th{white-space:nowrap;overflow-wrap:normal}details.table td{overflow-wrap:normal}
details.table td.long{white-space:normal}
.scalebar{display:inline-block;vertical-align:middle;width:12em;height:.9em;border:1px solid #bbb;
background:linear-gradient(to right,rgb(31,119,180),#fff,rgb(214,39,40))}
.scaleend{font-size:.85em;color:#555;margin:0 .3em;font-style:normal}
@media print{
body{max-width:none;margin:0;padding:0;font-size:10pt;line-height:1.3}
.filter,.count{display:none!important}.tablewrap{overflow:visible}
table{font-size:.85em}tr,figure,.verdict{break-inside:avoid}h2,h3{break-after:avoid}
figure img{max-height:45vh}
.tok,.scalebar{-webkit-print-color-adjust:exact;print-color-adjust:exact}
a{color:inherit;text-decoration:none}
}
"""
_CSP = interactive.CSP

_WS_VISIBLE = {"\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}


class Report:
    """A self-contained HTML report built block by block; every text argument is escaped.

    Every text (title, headings, cells, captions, tokens, details, the verdict) also goes through
    one :class:`~ctxleak.report.redaction.Redactor` first: by default the active one
    (:func:`ctxleak.report.redaction.redacting`: a run's view sets it from its ``--redact``);
    with ``redact=True`` one that masks PII, the active run's when one is active (``names``:
    person names known beforehand, e.g. found in a run's texts, added to it and masked wherever
    they appear), with ``redact=False`` none; or the Redactor given.
    """

    def __init__(self, title: str, subtitle: str = "", *,
                 redact: bool | Redactor | None = None, names: Iterable[str] = ()) -> None:
        self.redactor = redact if isinstance(redact, Redactor) \
            else redactor_for(redact, names=tuple(names))
        self.redact = self.redactor.on
        self.names = self.redactor.names
        self.title = self.clean(title)
        self.subtitle = self.clean(subtitle)
        self._blocks: list[str] = []
        self._verdict = ""
        self._footer = ""

    def set_verdict(self, text: str, rule: str = "",
                    table: Sequence[Mapping[str, Any]] = (), caption: str = "") -> None:
        """The run's verdict (one plain sentence) and the rule behind it, shown first: right
        under the title, above every other block (:mod:`ctxleak.methods.verdict`). With a
        ``table`` (the few rows a reader acts on), the verdict's first sentence, then the
        table, then the rest of its text: the first screen holds a table, not a paragraph."""
        rule_html = (f'<p class="verdict-rule"><span class="label">Rule:</span> '
                     f"{_esc(self.clean(rule))}</p>") if rule else ""
        head, rest, table_html = text, "", ""
        if table:
            self.add_table(list(table), caption=caption)
            table_html = self._blocks.pop()
            head, *more = _SENTENCE_END.split(str(text).strip(), maxsplit=1)
            rest = more[0] if more else ""
        rest_html = f'<p class="verdict-more">{_esc(self.clean(rest))}</p>' if rest else ""
        self._verdict = (f'<section class="verdict" id="verdict"><p class="verdict-text">'
                         f'<span class="label">Verdict:</span> {_esc(self.clean(head))}</p>'
                         f"{table_html}{rest_html}{rule_html}</section>")

    def clean(self, text: Any) -> str:
        """``text`` as this report shows it (PII masked when it redacts)."""
        return self.redactor.text(text)

    def shown_tokens(self, tokens: Sequence[str]) -> list[str]:
        """Tokens as this report shows them: when it redacts, a token overlapping PII in the
        joined text is masked (:func:`~ctxleak.report.redaction.redact_tokens`); same count."""
        return self.redactor.tokens(tokens)

    def _cell(self, value: Any) -> tuple[str, bool]:
        is_num = isinstance(value, numbers.Number) and not isinstance(value, bool)
        return _esc(self.clean(format_value(value))), is_num

    def _td(self, value: Any, column: Any = None) -> str:
        """One table cell: numbers right-aligned with their full value in ``data-v`` (for
        sorting), links to sections of the page, ids unbroken, long texts folded after "more"."""
        if isinstance(value, Link):
            return (f'<td class="id"><a href="#{value.anchor}">'
                    f"{_esc(self.clean(value.text))}</a></td>")
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            cell, _ = self._cell(value)
            if cell != _esc(format_value(value)):  # masked: its value is not kept for sorting
                return f'<td class="num">{cell}</td>'
            number = float(value)  # type: ignore[arg-type]  # Number: int, float, numpy, Decimal
            return f'<td class="num" data-v="{_esc(repr(number))}">{cell}</td>'
        text = self.clean(format_value(value))
        if str(column).lower() in interactive.ID_COLUMNS:
            return f'<td class="id">{_esc(text)}</td>'
        if str(column).lower() in interactive.WORD_COLUMNS:
            return f'<td class="word">{_esc(text)}</td>'
        cls = ' class="long"' if len(text) > 40 else ""  # never squeezed to a word per line
        return f"<td{cls}>{interactive.collapse(text)}</td>"

    def add_heading(self, text: str) -> None:
        """A section heading."""
        self._blocks.append(f"<h2>{_esc(self.clean(text))}</h2>")

    def add_text(self, text: str) -> None:
        """A paragraph of plain text (line breaks kept)."""
        self._blocks.append(f'<p class="text">{_esc(self.clean(text))}</p>')

    def add_kv(self, mapping: Mapping[Any, Any], caption: str = "") -> None:
        """A two-column table of keys and values."""
        rows = []
        for key, value in mapping.items():
            cell, is_num = self._cell(value)
            cls = ' class="num"' if is_num else ""
            rows.append(f"<tr><th scope=\"row\">{_esc(self.clean(key))}</th><td{cls}>{cell}</td></tr>")
        self._blocks.append(f'<table class="kv">{self._caption(caption)}'
                            f"<tbody>{''.join(rows)}</tbody></table>")

    def add_table(self, rows: Sequence[Mapping[str, Any]] | Sequence[Sequence[Any]],
                  headers: Sequence[str] | None = None, caption: str = "", *,
                  folded: str = "") -> None:
        """A table from a list of dicts (columns: ``headers`` or the keys in first-seen order;
        missing keys show "—") or from ``headers`` plus a list of row sequences. ``folded``:
        the table closed in a ``<details>`` block under that summary, its headers on one line
        and the table scrolled sideways where it is wider than the page (for a table of every
        column beside a shorter one shown open)."""
        rows = list(rows)  # type: ignore[assignment]  # a list of one of the two kinds
        if rows and all(isinstance(r, Mapping) for r in rows):
            if headers is None:
                cols: dict[Any, None] = {}
                for r in rows:
                    cols.update(dict.fromkeys(r))
                headers = list(cols)
            body = [[r.get(h) for h in headers] for r in rows]  # type: ignore[union-attr]
        elif any(isinstance(r, Mapping) for r in rows):
            raise TypeError("add_table: rows must be all dicts or all sequences")
        else:
            body = [list(r) for r in rows]
            if headers is not None and any(len(r) != len(headers) for r in body):
                raise ValueError(f"add_table: every row must have {len(headers)} cells")
        head = ""
        if headers is not None:
            head = "<thead><tr>" + "".join(
                f'<th scope="col">{_esc(self.clean(h))}</th>' for h in headers) + "</tr></thead>"
        columns = list(headers) if headers is not None else [None] * max(
            (len(r) for r in body), default=0)
        trs = ["<tr>" + "".join(self._td(v, c) for v, c in zip(r, columns)) + "</tr>"
               for r in body]
        cls = ' class="interactive"' if headers is not None and len(body) > 1 else ""
        box = interactive.filter_box(len(body)) if cls else ""
        table = (f'<div class="tablewrap">{box}<table{cls}>{self._caption(caption)}'
                 f"{head}<tbody>{''.join(trs)}</tbody></table></div>")
        if folded:
            table = (f'<details class="table"><summary>{_esc(self.clean(folded))}</summary>'
                     f"{table}</details>")
        self._blocks.append(table)

    def add_image(self, png_bytes: bytes, caption: str = "") -> None:
        """A PNG image embedded as a base64 ``data:`` URI."""
        data = bytes(png_bytes)
        if not data.startswith(PNG_SIGNATURE):
            raise ValueError("add_image: expected PNG bytes (missing PNG signature)")
        b64 = base64.b64encode(data).decode("ascii")
        cap = _esc(self.clean(caption))
        fig = f'<figure><img src="data:image/png;base64,{b64}" alt="{cap}">'
        if caption:
            fig += f"<figcaption>{cap}</figcaption>"
        self._blocks.append(fig + "</figure>")

    def add_token_heatmap(self, tokens: Sequence[str], scores: Sequence[float], caption: str = "",
                          vmax: float | None = None) -> None:
        """Tokens coloured by score: one ``<span>`` per token, background alpha ∝ |score| / vmax
        (red for positive, blue for negative), the score in its ``title``. Newlines, tabs and
        carriage returns are shown as ↵ → ␍ (a newline also breaks the line). ``vmax`` defaults to
        the largest |score|."""
        spans, scale = self._token_spans(tokens, scores, vmax, "add_token_heatmap")
        cap = f'<div class="caption">{_esc(self.clean(caption))}</div>' if caption else ""
        self._blocks.append(f'<div class="heatmap">{cap}<div class="tokens">{spans}'
                            f"</div>{_legend(scale)}</div>")

    def _token_spans(self, tokens: Sequence[str], scores: Sequence[float | None],
                     vmax: float | None, what: str) -> tuple[str, float]:
        """(one coloured ``<span>`` per token with its score in ``title``, the colour scale)."""
        tokens = [str(t) for t in tokens]
        if len(tokens) != len(scores):
            raise ValueError(f"{what}: {len(tokens)} tokens but {len(scores)} scores")
        vals = [float(s) if s is not None else math.nan for s in scores]
        finite = [abs(v) for v in vals if math.isfinite(v)]
        scale = float(vmax) if vmax is not None else (max(finite) if finite else 0.0)
        if not math.isfinite(scale) or scale <= 0:
            scale = 1.0
        shown = self.shown_tokens(tokens)
        spans = []
        for tok, v in zip(shown, vals):
            alpha = min(abs(v) / scale, 1.0) if math.isfinite(v) else 0.0
            rgb = "214,39,40" if v >= 0 or not math.isfinite(v) else "31,119,180"
            spans.append(f'<span class="tok" style="background-color:rgba({rgb},{alpha:.3f})" '
                         f'title="{_esc(format_value(v)) if math.isfinite(v) else MISSING}">'
                         f"{_visible_ws(tok)}</span>")
        return "".join(spans), scale

    def add_leak_map(self, anchor: str, title: str, context_tokens: Sequence[str],
                     context_scores: Sequence[float | None], response_tokens: Sequence[str],
                     response_scores: Sequence[float | None], *, note: str = "",
                     unit: str = "nats", scales: tuple[float, float] | None = None,
                     colours: str = "influence of the n-grams covering each token") -> None:
        """Where the context leaked into one response: the context tokens coloured by their
        influence on the response (left) beside the response tokens coloured by theirs (right),
        every value in the token's ``title`` (hover). ``scales`` (context, response) puts every
        map of a page on one scale; None: each map on its own. ``colours``: what the context's
        colours are, in its heading. ``anchor`` (made by ctxleak,
        e.g. ``ex-3``) is the section's id, for :class:`Link` cells to point at."""
        Link(title, anchor)  # checks the anchor
        c_max, r_max = scales if scales is not None else (None, None)
        ctx, c_scale = self._token_spans(context_tokens, context_scores, c_max, "add_leak_map")
        resp, r_scale = self._token_spans(response_tokens, response_scores, r_max,
                                          "add_leak_map")
        extra = f'<div class="caption">{_esc(self.clean(note))}</div>' if note else ""
        self._blocks.append(
            f'<section class="leakmap" id="{anchor}"><h3>{_esc(self.clean(title))}</h3>{extra}'
            f'<div class="maprow"><div class="mapcol"><h4>context: {_esc(colours)}</h4>'
            f'<div class="tokens">{ctx}</div>{_legend(c_scale, unit)}'
            '</div><div class="mapcol"><h4>response: influence on each token</h4>'
            f'<div class="tokens">{resp}</div>{_legend(r_scale, unit)}</div></div></section>')

    def add_details(self, summary: str, text: str) -> None:
        """A collapsible block (``<details>``) with preformatted text, e.g. a full context."""
        self._blocks.append(f"<details><summary>{_esc(self.clean(summary))}</summary>"
                            f"<pre>{_esc(self.clean(text))}</pre></details>")

    def add_citations(self, papers: Iterable[Any], bibtex: str) -> None:
        """The page's footer: each paper (a :class:`ctxleak.citations.Paper`) by title, authors,
        venue and link, and the BibTeX to cite them. Constant text of ctxleak's own, so it is
        escaped but never redacted."""
        items = []
        for p in papers:
            link = f' <a href="{_esc(p.url)}">{_esc(p.url)}</a>' if p.url else ""
            arxiv = f" arXiv:{_esc(p.arxiv)}." if p.arxiv else ""
            items.append(f"<li><cite>{_esc(p.title)}</cite>. {_esc(', '.join(p.authors))}. "
                         f"{_esc(p.venue)}, {p.year}.{arxiv}{link}</li>")
        self._footer = ('<footer class="cite"><h2>How to cite</h2><p>The quantities on this page '
                        "are defined in:</p><ul>" + "".join(items) + "</ul>"
                        '<details><summary>BibTeX</summary><pre class="bibtex">'
                        f"{_esc(bibtex)}</pre></details></footer>")

    def _caption(self, caption: str) -> str:
        return f"<caption>{_esc(self.clean(caption))}</caption>" if caption else ""

    def render(self) -> str:
        """The whole page as one HTML string."""
        sub = f'<p class="subtitle">{_esc(self.subtitle)}</p>' if self.subtitle else ""
        body = "\n".join(self._blocks)
        return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
                '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                '<meta name="referrer" content="no-referrer">\n'
                f"<title>{_esc(self.title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
                f"<h1>{_esc(self.title)}</h1>\n{sub}\n{self._verdict}\n{body}\n{self._footer}\n"
                f"<script>{interactive.SCRIPT}</script>\n</body>\n</html>\n")

    def fragment(self) -> str:
        """The blocks without the page around them (for Jupyter's ``_repr_html_``)."""
        sub = f'<p class="subtitle">{_esc(self.subtitle)}</p>' if self.subtitle else ""
        return (f'<div class="ctxleak"><h3>{_esc(self.title)}</h3>{sub}{self._verdict}'
                + "\n".join(self._blocks) + "</div>")

    def save(self, path: str | os.PathLike[str], mode: int = 0o644, *,
             overwrite: bool = False) -> Path:
        """Write the page whole or not at all (temp file in the same folder, fsync, moved into
        place). Pass ``mode=0o600`` for reports that hold PII. An existing file is replaced only
        with ``overwrite=True``. Returns the path."""
        target = Path(path)
        refuse_replacing(target, overwrite=overwrite)
        write_atomic(target, self.render(), mode, replace=overwrite)
        return target


def _legend(scale: float, unit: str = "") -> str:
    """The colour legend of a token map: a bar from blue (−scale) through white (0) to red
    (+scale), its ends labelled in ``unit``, and how to read it."""
    end = _esc(format_value(scale)) + (f" {_esc(unit)}" if unit else "")
    return (f'<div class="caption legend"><em class="scaleend">−{end}</em>'
            '<div class="scalebar" role="img" aria-label="colour scale from blue (negative) '
            f'through white (zero) to red (positive)"></div><em class="scaleend">+{end}</em>'
            f" colour: |score| / {_esc(format_value(scale))}; red positive (more likely with the "
            "context), blue negative; hover a token for its score</div>")


def _visible_ws(token: str) -> str:
    """Escape a token, showing newline/tab/CR as dim glyphs (a newline also breaks the line)."""
    out = []
    for ch in token:
        glyph = _WS_VISIBLE.get(ch)
        if glyph is None:
            out.append(_esc(ch))
        else:
            out.append(f'<i class="ws">{glyph}</i>' + ("\n" if ch == "\n" else ""))
    return "".join(out)


__all__ = ["MISSING", "REDACTED", "Link", "Report", "format_value", "redact_text", "redaction_spans"]
