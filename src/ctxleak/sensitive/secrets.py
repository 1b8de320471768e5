"""Passwords, keys and tokens found by detect-secrets (Yelp's scanner for credentials in code).

Each line of a text goes through detect-secrets' own plugins:

- every regular-expression detector it ships (AWS access keys, GitHub, GitLab, Slack, Stripe,
  OpenAI, JWT, private-key headers, basic-auth URLs ...), matched on the line;
- its keyword detector, which reads assignments (``db_password = 'Tr0ub4dor&3x'``,
  ``api_key: 3f9a...``), both as a YAML-like file and as code;
- its high-entropy detectors (base64 and hex, at their default limits), on each token of the
  line quoted, since they only look inside quotes: a random-looking token anywhere in prose
  counts, and the whole token is taken when its high-entropy part is a piece of it.

Offsets are into the text. Nothing is downloaded: the plugins are pure Python.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from ctxleak.sensitive.span import Span

__all__ = ["find_secrets"]

#: detect-secrets' plugins that find network addresses, not credentials
_SKIP = {"IPPublicDetector"}
_TOKEN_RE = re.compile(r"[A-Za-z0-9_\-+/=.:@!$%&*#~]{16,1024}")  # bounded, as every pattern here
#: the next sentence glued on after a full stop
_GLUED_RE = re.compile(r"\.[A-Z][a-z]{1,40}(?![\w-])")
_TRIM = ".,;:)]}'\""
_lock = threading.Lock()
_plugins: list[Any] | None = None


def _load() -> list[Any]:
    """detect-secrets' plugins, built once per process (with its default settings)."""
    global _plugins
    with _lock:
        if _plugins is None:
            import warnings

            shown = warnings.showwarning
            from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
            from detect_secrets.settings import default_settings

            # detect-secrets' import turns on logging.captureWarnings, which sends every later
            # warning of the process to a logger nobody reads: the user's warnings come back
            warnings.showwarning = shown

            with default_settings():
                classes: list[Any] = list(get_mapping_from_secret_type_to_class().values())
                _plugins = [cls() for cls in classes if cls.__name__ not in _SKIP]
        return _plugins


def _values(plugin: Any, filename: str, line: str) -> list[str]:
    try:
        return [str(p.secret_value) for p in plugin.analyze_line(filename=filename, line=line,
                                                                 line_number=1)
                if p.secret_value]
    except Exception:  # noqa: BLE001 - a plugin that cannot read a line finds nothing in it
        return []


def _line_spans(line: str, plugins: list[Any]) -> list[tuple[int, int, str]]:
    found: list[tuple[int, int, str]] = []
    for plugin in plugins:
        name = type(plugin).__name__
        if name == "KeywordDetector":
            for filename in ("doc.yaml", "doc.py"):
                for value in _values(plugin, filename, line):
                    # read as YAML, the value runs to the end of the line: in prose, the
                    # password is its first word ("password: Hunter2! The door ...")
                    first = _glued((value.split()[0] if value.split() else value)
                                   ).rstrip(_TRIM)
                    found += [(m.start(), m.start() + len(first),
                               "password" if _is_password(line, m.start()) else "secret")
                              for m in re.finditer(re.escape(value), line)]
        elif "HighEntropy" in name:
            for tok in _TOKEN_RE.finditer(line):
                text = _glued(tok.group(0)).rstrip(_TRIM)
                if sum(c.isdigit() for c in text) and sum(c.isalpha() for c in text) \
                        and _values(plugin, "doc.py", f'"{text}"'):
                    found.append((tok.start(), tok.start() + len(text), "secret"))
        else:
            for rx in getattr(plugin, "denylist", ()):
                found += [(m.start(), m.end(), "secret") for m in rx.finditer(line)
                          if m.end() - m.start() >= 8]
    return found


def _glued(value: str) -> str:
    """``value`` without a next sentence glued on after a full stop ("Qx7!vR2.The"): texts
    joined without spaces (a passage list) read so."""
    m = _GLUED_RE.search(value)
    return value[:m.start()] if m else value


def _is_password(line: str, start: int) -> bool:
    """Whether the keyword nearest before ``start`` names a password (not a key or token)."""
    before = line[max(0, start - 40):start].lower()
    words = {w: before.rfind(w) for w in ("pass", "pwd", "key", "token", "secret", "auth")}
    nearest = max(words, key=lambda w: words[w])
    return words[nearest] >= 0 and nearest in ("pass", "pwd")


def find_secrets(text: str) -> list[Span]:
    """Credentials detect-secrets finds in ``text`` (type ``password`` after a password keyword,
    else ``secret``), with offsets into ``text``; may overlap (the caller resolves overlaps)."""
    plugins = _load()
    spans: list[Span] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        for start, end, kind in _line_spans(line, plugins):
            spans.append(Span(kind, offset + start, offset + end, line[start:end], 0.9))
        offset += len(line)
    return spans
