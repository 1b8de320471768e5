"""A target whose code raises a BaseException that is not an error (GeneratorExit, a class of
its own) is one TargetError naming it, not a traceback; Ctrl-C and SIGTERM still stop the run
(issue 84)."""

from __future__ import annotations

import asyncio

import pytest

from ctxleak.targets.base import FunctionTarget, TargetError, no_exit
from ctxleak.targets.journal import AnswerJournal, JournaledTarget


class Halt(BaseException):
    """A user's own BaseException, as some frameworks define to unwind."""


def _raising(exc: BaseException):
    def answer(question: str) -> str:
        if question == "boom":
            raise exc
        return "fine"
    return answer


@pytest.mark.parametrize("exc, says", [
    (GeneratorExit(), "raised GeneratorExit (not an error"),
    (GeneratorExit("closed early"), "raised GeneratorExit: closed early (not an error"),
    (Halt("stop\nsecond line"), "raised Halt: stop (not an error"),
])
def test_a_base_exception_from_the_target_is_one_target_error(tmp_path, exc, says):
    target = FunctionTarget(_raising(exc), "mine")
    with pytest.raises(TargetError) as caught:
        target.answer(["ok", "boom"])
    message = str(caught.value)
    assert message.startswith("mine " + says) and message.endswith("on question 2")
    assert "\n" not in message and caught.value.answered[0].text == "fine"
    with AnswerJournal(tmp_path / "a.db") as journal, pytest.raises(TargetError) as journaled:
        JournaledTarget(FunctionTarget(_raising(exc), "mine"), journal).answer(["ok", "boom"])
    assert says in str(journaled.value)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_an_interrupt_or_a_cancellation_still_passes(exc):
    with pytest.raises(type(exc)):
        FunctionTarget(_raising(exc), "mine").answer(["boom"])
    with pytest.raises(ValueError):  # an error is the call site's to name, as before
        with no_exit():
            raise ValueError("x")


def test_the_attack_cli_says_it_in_one_line(tmp_path, capsys):
    from conftest import run_cli

    app = tmp_path / "app.py"
    app.write_text("def answer(question):\n    raise GeneratorExit('bye')\n")
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "the vault code is 4471"}\n'
                    '{"id": "b", "text": "the door is painted blue"}\n')
    code, _, stderr = run_cli(["attack", "extract", "--function", f"{app}:answer",
                               "--documents", str(docs), "--output", str(tmp_path / "r")],
                              capsys)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in stderr, stderr
    assert "raised GeneratorExit: bye (not an error" in errors[0]
