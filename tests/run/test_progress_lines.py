"""Progress off a terminal: when stderr is a log file or a pipe, progress comes as whole lines
(one every few seconds and one at the end), never as a bar redrawn with carriage returns; on a
terminal it stays a bar."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from ctxleak.run import progress as run_progress

SCRIPT = """
from ctxleak.run.progress import RunProgress
with RunProgress(40, "influence") as bar:
    for _ in range(40):
        for _ in range(50):
            bar.add_tokens(7)
        bar.example_done()
"""


def test_a_log_file_gets_whole_lines(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with run_progress.RunProgress(40, "influence") as bar:
        for _ in range(40):
            for _ in range(50):
                bar.add_tokens(7)
            bar.example_done()
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n"), repr(text[:300])
    lines = text.splitlines()
    assert 1 <= len(lines) <= 3, lines  # one at the end, fewer than one per 10 s before
    assert lines[-1].startswith("influence: 14.0k/14.0k tok, 40/40 examples"), lines[-1]


def test_every_few_seconds_a_line(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(run_progress, "LINE_EVERY_S", 0.0)
    with run_progress.RunProgress(3, "icl") as bar:  # nothing reports tokens: examples count
        for _ in range(3):
            bar.example_done()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) >= 3, lines
    assert lines[-1].startswith("icl: 3/3 ex"), lines


def test_a_process_that_imported_ipykernel_is_not_a_notebook(monkeypatch):
    """A process that ran a notebook as a client (``ipykernel`` imported, no kernel of its
    own) still writes whole lines to a log file; inside a kernel the bar is drawn."""
    import types

    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not run_progress.in_notebook()
    assert run_progress.bar_class() is run_progress.LineProgress
    shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython",
                        types.SimpleNamespace(get_ipython=lambda: shell))
    assert run_progress.in_notebook() and run_progress.bar_class() is not run_progress.LineProgress


def test_a_pipe_gets_whole_lines():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, env=env,
                          timeout=60, check=True)
    err = done.stderr.decode()
    assert "\r" not in err and 1 <= len(err.splitlines()) <= 3, repr(err[:300])


def test_a_terminal_keeps_the_bar(monkeypatch):
    main, other = os.openpty()
    try:
        with os.fdopen(other, "w") as tty:
            monkeypatch.setattr(sys, "stderr", tty)
            assert run_progress.bar_class() is run_progress.text_tqdm
    finally:
        os.close(main)


def test_a_line_says_the_time_left_at_the_rate_so_far(monkeypatch):
    log = io.StringIO()
    clock = iter([100.0, 130.0, 130.0, 160.0, 160.0])
    monkeypatch.setattr(run_progress.time, "monotonic", lambda: next(clock))
    bar = run_progress.LineProgress(total=4, desc="influence", unit="ex", file=log, every=0.0)
    bar.update(1)  # 1 of 4 in 30 s: 3 more at 30 s each
    bar.update(1)  # 2 of 4 in 60 s: 2 more at 30 s each
    lines = log.getvalue().splitlines()
    assert lines == ["influence: 1/4 ex (00:30, about 01:30 left)",
                     "influence: 2/4 ex (01:00, about 01:00 left)"], lines


def test_an_attack_counts_queries_not_examples(monkeypatch, tmp_path):
    import ctxleak
    from ctxleak.targets.base import FunctionTarget

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    docs = [{"id": "a", "text": "Quillon signed the lease in Porto. The rent is 4417 euros."},
            {"id": "b", "text": "The lease in Porto ends soon. Rent is paid monthly, Varnholt."}]
    ctxleak.attack_membership(FunctionTarget(lambda q: "No.", "no"), docs[:1],
                              non_members=docs[1:], attacks=["direct", "completion"],
                              output=str(tmp_path / "m"), progress=True)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("membership:")]
    # the function target reports no tokens: the bar counts the queries themselves
    assert lines and lines[-1].startswith("membership: 4/4 queries"), log.getvalue()
    bar = run_progress.RunProgress(2, "extraction", noun="queries")
    bar.add_tokens(5)
    bar.example_done()
    assert bar.bar.postfix == "1/2 queries"
    bar.close()
