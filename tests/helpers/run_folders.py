"""Run folders as other versions of ctxleak left them."""

from __future__ import annotations

from pathlib import Path

from ctxleak.run.manifest import MANIFEST_FILE


def without_manifest(path: str | Path) -> Path:
    """``path`` as a ctxleak that kept no manifest wrote it: no ``.ctxleak-manifest.json`` and
    no line digests of its samples."""
    path = Path(path)
    (path / MANIFEST_FILE).unlink(missing_ok=True)
    for digests in path.glob(".samples*.jsonl.sha256*"):
        digests.unlink()
    return path
