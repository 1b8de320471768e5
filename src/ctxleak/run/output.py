"""What :func:`ctxleak.run.run_method` returns: plain data, no Result and no report.

The run layer stops at the records, the summary and the provenance; the face that called it
(:mod:`ctxleak.api`, the CLI) hands them to :func:`ctxleak.results.finish_run`, which builds the
method's Result, writes ``results.json``, the figures and ``report.html`` into the run folder
and returns the Result. So no layer below the results reaches up to them, by import or by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxleak.run.rundir import RunDir


@dataclass(frozen=True)
class RunOutput:
    """A finished run, as plain data.

    ``command``: the method's name (``config["command"]``); ``records``: one dict per example, as
    in ``samples.jsonl``, in item order (rows read from that file on demand,
    :class:`~ctxleak.run.stored.StoredRows`, or a list); ``summary``: the method's summary of them;
    ``config``: the run's full config (as in ``config.json``); ``provenance``: model, versions,
    seeds; ``run``: the run folder, still claimed, for the files that finishing writes."""

    command: str
    records: Sequence[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]
    provenance: dict[str, Any]
    run: RunDir

    @property
    def path(self) -> Path:
        """The run folder."""
        return self.run.path
