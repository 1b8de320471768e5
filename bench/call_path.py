"""The call path from ``ctxleak.influence(...)`` to its files: every ctxleak function on the
call stack at three moments of one run on the default model (one demo example, two new tokens,
16-token windows): the first forward pass through the model, the first ``samples.jsonl`` row
written, and the ``results.json`` write. Prints each stack from ``ctxleak.influence`` down and
counts the distinct functions on the three (a hand-off is one function calling the next).
docs/architecture.md gives the figures of the current layout.

    python bench/call_path.py

Nothing is timed. The file writes are seen by wrapping ``open``, ``os.open`` and ``os.replace``
for the run's length, the forward pass by wrapping ``torch.nn.Module.__call__``; all are put
back at the end.
"""

from __future__ import annotations

import builtins
import io
import os
import tempfile
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any, Iterator

import torch

import ctxleak

MOMENTS = ("the first forward pass", "the first samples.jsonl row", "the results.json write")
FILES = {"samples.jsonl": MOMENTS[1], "results.json": MOMENTS[2]}

Frame = traceback.FrameSummary
PACKAGE = os.path.dirname(os.path.abspath(ctxleak.__file__)) + os.sep


def _ours(skip: int) -> list[Frame]:
    """The ctxleak frames of the current stack, outermost first (``skip`` innermost left out)."""
    return [f for f in traceback.extract_stack()[:-skip] if f.filename.startswith(PACKAGE)]


@contextmanager
def watching(stacks: dict[str, list[Frame]]) -> Iterator[None]:
    """Record in ``stacks`` the ctxleak frames at each of :data:`MOMENTS`, the first time only."""
    saved: list[tuple[Any, str, Callable[..., Any]]] = [
        (builtins, "open", builtins.open), (io, "open", io.open), (os, "open", os.open),
        (os, "replace", os.replace), (torch.nn.Module, "__call__", torch.nn.Module.__call__)]

    def seen(path: Any) -> None:
        for name, moment in FILES.items():
            if os.path.basename(str(path)) == name and moment not in stacks:
                stacks[moment] = _ours(3)

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            seen(file)
        return saved[0][2](file, mode, *args, **kwargs)

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR):
            seen(path)
        return int(saved[2][2](path, flags, *args, **kwargs))

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        seen(dst)
        saved[3][2](src, dst, *args, **kwargs)

    def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        stacks.setdefault(MOMENTS[0], _ours(2))
        return saved[4][2](module, *args, **kwargs)

    for (owner, name, _), new in zip(saved, (open_, open_, os_open, replace, call)):
        setattr(owner, name, new)
    try:
        yield
    finally:
        for owner, name, old in saved:
            setattr(owner, name, old)


def main() -> None:
    stacks: dict[str, list[Frame]] = {}
    with tempfile.TemporaryDirectory() as tmp, watching(stacks):
        ctxleak.influence("default", "demo", limit=1, max_new_tokens=2, ngram=16,
                          output=os.path.join(tmp, "run"), progress=False)
    functions: list[tuple[str, str]] = []
    for moment in MOMENTS:
        stack = stacks[moment]
        start = next(i for i, f in enumerate(stack)
                     if f.name == "influence" and f"api{os.sep}methods.py" in f.filename)
        print(f"{moment}:")
        for f in stack[start:]:
            where = os.path.relpath(f.filename, PACKAGE)
            print(f"  {where}:{f.lineno} {f.name}")
            if (where, f.name) not in functions:
                functions.append((where, f.name))
    print(f"{len(functions)} functions on the three stacks from ctxleak.influence, "
          f"{len(functions) - 1} hand-offs")


if __name__ == "__main__":
    main()
