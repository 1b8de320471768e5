"""Compare two run directories, ignoring wall-clock times and the directories' own paths:
how the tests check that the CLI and the API (or the code before and after a refactor) write the
same run folder."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# keys whose values are wall-clock measurements
TIME_KEY = re.compile(r"(^|_)(seconds?|time|timings?|wall|elapsed)(_|$)|_s$|^seconds|per_query_s|"
                      r"speedup|^time_per")
# numbers that follow a time word in HTML or console text
TIME_TEXT = re.compile(r"((?:seconds?|time|_s\b|s/query|speedup)[^\d<>]{0,40}"
                       r"(?:</th><td[^>]*>)?)[-+]?\d[0-9.e+-]*(?:x|s)?")

# "6.9 s": a duration in a subtitle or a sentence
DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)? s(?=[<\s),;])")
# "4.3% of the measuring time": a share of wall time (the influence control's cost)
TIME_SHARE = re.compile(r"\d+(?:\.\d+)?% of the measuring time")



def untimed(value: Any) -> Any:
    """``value`` (parsed JSON, or a result's records read on demand) without the entries whose
    keys name wall-clock measurements; any sequence but a string comes back as a list."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not TIME_KEY.search(str(k))}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [untimed(v) for v in value]
    return value


def untimed_samples(run_dir: Path) -> list[str]:
    """A run's samples.jsonl, each line re-serialised without its timing fields (key order
    kept): what must be byte-identical between two runs with the same seed."""
    return [json.dumps(untimed(json.loads(line)))
            for line in (Path(run_dir) / "samples.jsonl").read_text().splitlines()]


TABLE = re.compile(r"<table.*?</table>", re.S)
ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>", re.S)


def _blank_time_columns(html: str) -> str:
    """Cells of table columns headed by a time word (``seconds``) become ``<T>``."""
    def table(match: re.Match) -> str:
        text = match.group(0)
        rows = ROW.findall(text)
        if not rows or "<thead>" not in text:  # key-value tables have no header row
            return text
        heads = CELL.findall(rows[0])
        cols = {i for i, h in enumerate(heads) if re.search(r"second|time", h)}
        if not cols:
            return text

        def row(m: re.Match) -> str:
            cells = list(CELL.finditer(m.group(1)))
            inner = m.group(1)
            for i in sorted(cols, reverse=True):
                if i < len(cells) and m.group(1) != rows[0]:
                    c = cells[i]
                    inner = inner[:c.start(1)] + "<T>" + inner[c.end(1):]
            return f"<tr>{inner}</tr>"
        return ROW.sub(row, text)
    return TABLE.sub(table, html)


def _text(path: Path, root: Path) -> str:
    text = path.read_text(encoding="utf-8").replace(str(root), "<RUN>")
    return text


def normalised(path: Path, root: Path) -> Any:
    """A file's content with times and the run directory's path taken out."""
    if path.suffix == ".json":
        return untimed(json.loads(_text(path, root)))
    if path.suffix == ".jsonl":
        return [untimed(json.loads(line)) for line in _text(path, root).splitlines() if line]
    if path.suffix == ".html":
        html = _blank_time_columns(_text(path, root))
        html = TIME_SHARE.sub("<T>% of the measuring time", html)
        return DURATION.sub("<T> s", TIME_TEXT.sub(r"\1<T>", html))
    return path.read_bytes()


def same(a: Any, b: Any, rel: float = 1e-12) -> bool:
    """Equal JSON values, floats within ``rel`` (a sum taken in another order differs in its
    last bits; anything larger is a real change)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return abs(a - b) <= rel * max(abs(a), abs(b)) or a == b
    return a == b


def run_dir_differences(a: str | Path, b: str | Path, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Names of the files that differ (or exist in one folder only), times and paths aside.
    PNG plots are compared byte for byte unless named in ``skip``."""
    a, b = Path(a), Path(b)
    names_a = {p.name for p in a.iterdir() if not p.name.startswith(".")}
    names_b = {p.name for p in b.iterdir() if not p.name.startswith(".")}
    out = sorted(f"only in {a if n in names_a else b}: {n}" for n in names_a ^ names_b)
    for name in sorted(names_a & names_b):
        if name in skip:
            continue
        if not same(normalised(a / name, a), normalised(b / name, b)):
            out.append(name)
    return out
