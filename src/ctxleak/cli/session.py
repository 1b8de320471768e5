"""What every model command does around its method: open the run directory, load the model,
loop over examples with a progress bar (skipping finished ones on resume), and finish with
``results.json`` and the report."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ctxleak.cli.options import CommonOptions
from ctxleak.run.rundir import RunDir


def default_output(command: str) -> str:
    return str(Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}")


def open_run(command: str, common: CommonOptions, config: dict[str, Any], *,
             private: bool = False) -> RunDir:
    """The run directory with the full config (common flags included) stored for resume."""
    output = common.output or default_output(command)
    full = {"command": command, **common.to_dict(), **config, "output": output}
    return RunDir(output, full, resume=common.resume, private=private)


def load_lm(common: CommonOptions):
    from ctxleak.engine.models import load_model

    t0 = time.time()
    lm = load_model(common.model, device=common.device, dtype=common.dtype,
                    chat_template=common.chat_template,
                    trust_remote_code=common.trust_remote_code)
    say(f"model {lm.info.name} on {lm.info.device} ({lm.info.dtype}) in {time.time() - t0:.1f}s")
    return lm


def say(message: str) -> None:
    print(f"[ctxleak] {message}", file=sys.stderr, flush=True)


def run_examples(run: RunDir, items: Sequence[Any], key: Callable[[Any], str],
                 work: Callable[[int, Any], dict[str, Any]], *, desc: str) -> list[dict]:
    """Call ``work(index, item)`` for each item not yet in ``samples.jsonl`` and append its
    record (with ``id``); return all records, earlier ones included, in item order."""
    from tqdm.auto import tqdm

    done = run.done_keys("id")
    todo = [(i, item) for i, item in enumerate(items) if key(item) not in done]
    if done:
        say(f"resuming: {len(items) - len(todo)} of {len(items)} examples already done")
    for i, item in tqdm(todo, desc=desc, unit="ex", file=sys.stderr, dynamic_ncols=True):
        record = work(i, item)
        record = {"id": key(item), **record}
        run.append_sample(record)
    by_id = {row["id"]: row for row in run.samples}
    return [by_id[key(item)] for item in items if key(item) in by_id]


def iter_limit(rows: Iterable[Any], limit: int | None) -> list[Any]:
    rows = list(rows)
    return rows if limit is None else rows[:limit]
