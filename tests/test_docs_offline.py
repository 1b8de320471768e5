"""The documentation site reads offline: every script and stylesheet it loads is its own.

The site is built once (``mkdocs build --strict``, about 5 s alone) into a temporary folder, or
read from ``$CTXLEAK_SITE_DIR``, where scripts/check.sh's docs phase has just built it. Every
page's ``<script src>`` and ``<link href>`` must be a path inside the site that exists there,
never an ``http(s)://`` or protocol-relative address: a CDN's MathJax leaves every formula as
raw LaTeX on a closed network, and Material's Google Fonts would be fetched too. MathJax itself
(its ``tex-mml-chtml`` component and its web fonts) must be in the site.
"""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]


class _Loads(HTMLParser):
    """The addresses a page loads: ``<script src>`` and ``<link href>`` (stylesheets, icons)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


def loads(page: Path) -> list[str]:
    parser = _Loads()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.urls


def local(site: Path, page: Path, path: str) -> Path:
    """The file a page's address names: from the site's root (``/...``, the 404 page's) or from
    the page's folder."""
    if path.startswith("/"):
        return site / path.lstrip("/")
    return (page.parent / path).resolve()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = os.environ.get("CTXLEAK_SITE_DIR")  # scripts/check.sh's docs phase built it
    if built and (Path(built) / "index.html").is_file():
        return Path(built)
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_script_and_stylesheet_is_served_by_the_site(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    outside, missing = [], []
    for page in pages:
        for url in loads(page):
            parts = urlsplit(url)
            if parts.scheme or parts.netloc:
                outside.append(f"{page.relative_to(site)}: {url}")
            elif parts.path and not local(site, page, parts.path).exists():
                missing.append(f"{page.relative_to(site)}: {url}")
    assert not outside, "loaded from outside the site:\n" + "\n".join(outside)
    assert not missing, "not in the site:\n" + "\n".join(missing)


def test_mathjax_is_in_the_site_and_every_page_loads_it(site: Path) -> None:
    mathjax = site / "mathjax"
    assert (mathjax / "tex-mml-chtml.js").stat().st_size > 100_000
    assert list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("MathJax_Main-*.woff"))
    assert (mathjax / "input" / "tex" / "extensions" / "autoload.js").is_file()
    for page in (site / "index.html", site / "methods" / "influence" / "index.html"):
        srcs = [urlsplit(url).path for url in loads(page)]
        assert any(src.endswith("mathjax/tex-mml-chtml.js") for src in srcs), page
    # the formulas are there for it to typeset (pymdownx.arithmatex's generic output)
    assert 'class="arithmatex"' in (site / "methods" / "influence" / "index.html").read_text()
