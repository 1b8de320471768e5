"""The end of every run: from :class:`ctxleak.run.output.RunOutput` (plain data) to the method's
Result, with ``results.json``, the figures and ``report.html`` written into the run folder."""

from __future__ import annotations

import time

from ctxleak.report.views import view_for
from ctxleak.results.base import Result
from ctxleak.results.methods import result_class
from ctxleak.run.output import RunOutput


def finish_run(output: RunOutput) -> Result:
    """Build the Result of ``output`` (the class of its method), write the method view's extra
    files (figures, ``hits.jsonl`` ...), ``results.json`` (its one writer,
    :meth:`Result.save_results`, through the run folder) and ``report.html``; return the Result
    with its figures and page attached."""
    run = output.run
    result = result_class(output.command)(
        records=output.records, summary=output.summary, config=output.config,
        provenance=output.provenance, path=run.path, n_effective=len(output.records))
    for name, content in view_for(output.command).files(result).items():
        run.write_file(name, content)
        if isinstance(content, bytes):
            result.images[name] = content
    if run.scrub is not None:  # the run's secrets, found in its records, masked here too
        result.summary = run.scrub.value(result.summary)
    result.wall_time_s = round(time.time() - run.started, 3)
    run.write_results(result)
    html = result.render()
    run.write_file("report.html", html)
    result.html = html
    return result
