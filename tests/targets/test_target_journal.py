"""The answer journal: a resumed audit sends no question twice (requests counted on the fake
server) and reads back the same bytes; answers had before a failure are kept; --max-queries
refuses before anything is sent; the cost estimate recomputed by hand."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from helpers.fake_chat import Reply, echo, fake_chat

from ctxleak.errors import ConfigError, InputError
from ctxleak.targets.base import FunctionTarget, TargetAnswer, TargetError
from ctxleak.targets.endpoint import ChatEndpointTarget
from ctxleak.targets.journal import (
    AnswerJournal,
    JournaledTarget,
    answer_from_json,
    answer_json,
    estimate_cost,
)

QUESTIONS = [f"question number {k}" for k in range(10)]


def endpoint(url):
    return ChatEndpointTarget(url, "m", retries=0, concurrency=1)


def test_a_resumed_run_sends_nothing_twice_and_reads_back_the_same_bytes(tmp_path):
    down = {"on": True}

    def reply(body, headers):  # the server fails on question 8 (a chunk's last) while "down"
        if down["on"] and body["messages"][-1]["content"] == QUESTIONS[7]:
            return Reply(500, {"error": {"message": "down"}})
        return echo(body, headers)

    with fake_chat(reply) as server:
        with AnswerJournal(tmp_path / "answers.db") as journal:
            first = JournaledTarget(endpoint(server.url), journal, chunk=4)
            with pytest.raises(TargetError, match=r"'question number 7'.*keeps the 7 answers"
                               ) as err:
                first.answer(QUESTIONS)
            assert err.value.index == 7 and sorted(err.value.answered) == list(range(7))
            assert err.value.answered[2].text == f"answer: {QUESTIONS[2]}"
            assert journal.count(first.key) == 7  # chunk 1 whole, chunk 2 up to the failure
        sent_first = server.asked()
        down["on"] = False
        with AnswerJournal(tmp_path / "answers.db") as journal:  # a new process would reopen it
            second = JournaledTarget(endpoint(server.url), journal, chunk=4)
            got = second.answer(QUESTIONS)
            assert (second.sent, second.replayed) == (3, 7)
            again = second.answer(QUESTIONS)
            assert second.sent == 3
    resent = server.asked()[len(sent_first):]
    assert resent == QUESTIONS[7:]
    assert [a.text for a in got] == [f"answer: {q}" for q in QUESTIONS]
    assert [answer_json(a) for a in again] == [answer_json(a) for a in got]
    with fake_chat() as fresh:
        with AnswerJournal(tmp_path / "other.db") as journal:
            whole = JournaledTarget(endpoint(fresh.url), journal).answer(QUESTIONS)
    assert [answer_json(a) for a in whole] == [answer_json(a) for a in got]


def test_a_chain_that_raises_keeps_the_answers_before_it(tmp_path):
    calls: list[str] = []

    def chain(question):
        calls.append(question)
        if question == QUESTIONS[3] and len(calls) < 5:
            raise RuntimeError("the vector store is down")
        return question.upper(), [{"id": "d1", "text": "doc"}]

    with AnswerJournal(tmp_path / "a.db") as journal:
        target = JournaledTarget(FunctionTarget(chain, "chain"), journal)
        with pytest.raises(TargetError, match="chain raised RuntimeError on question 4"):
            target.answer(QUESTIONS)
        assert journal.count(target.key) == 3
        got = target.answer(QUESTIONS)
    assert calls == QUESTIONS[:4] + QUESTIONS[3:]
    assert got[0] == TargetAnswer(QUESTIONS[0].upper(), ("d1",), ("doc",))


def test_duplicates_are_sent_once_and_targets_do_not_share_answers(tmp_path):
    seen: list[str] = []
    with AnswerJournal(tmp_path / "a.db") as journal:
        one = JournaledTarget(FunctionTarget(lambda q: seen.append(q) or "one", "one"), journal)
        two = JournaledTarget(FunctionTarget(lambda q: seen.append(q) or "two", "two"), journal)
        assert [a.text for a in one.answer(["a", "b", "a"])] == ["one"] * 3
        assert [a.text for a in two.answer(["a"])] == ["two"]
    assert seen == ["a", "b", "a"]  # "a" once per target


def test_max_queries_refuses_before_sending(tmp_path):
    with fake_chat() as server, AnswerJournal(tmp_path / "a.db") as journal:
        target = JournaledTarget(endpoint(server.url), journal, max_queries=5)
        with pytest.raises(ConfigError, match="10 new queries") as err:
            target.answer(QUESTIONS)
        assert err.value.param == "max_queries" and server.requests == []
        target.answer(QUESTIONS[:3])
        with pytest.raises(ConfigError, match="holds 3 already: 6 in all, more than the 5"):
            target.answer(QUESTIONS[:6])
        assert len(server.requests) == 3
        target.answer(QUESTIONS[:5])  # 3 held + 2 new = 5: allowed
        assert len(server.requests) == 5
    with pytest.raises(ConfigError, match="max_queries"):
        JournaledTarget(FunctionTarget(str), AnswerJournal(tmp_path / "b.db"), max_queries=-1)


def test_the_journal_file(tmp_path):
    path = tmp_path / "a.db"
    with AnswerJournal(path) as journal:
        journal.put("t", "q", TargetAnswer("first"))
        journal.put("t", "q", TargetAnswer("second"))  # an answer stored is kept
        # the target's answers are private, as every file of a run folder: 0600, and SQLite's
        # write-ahead log beside it the same
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(Path(f"{path}-wal").stat().st_mode) == 0o600
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with AnswerJournal(path) as journal:
        assert journal.get("t", ["q", "other"]) == {"q": TargetAnswer("first")}
    bad = tmp_path / "bad.db"
    bad.write_text("this is not a database, it is a text file long enough " * 20)
    with pytest.raises(InputError, match="bad.db: not an answer journal"):
        AnswerJournal(bad)
    answer = TargetAnswer("é", ("1",), ("d",))
    assert answer_from_json(answer_json(answer)) == answer


def test_a_journal_not_yet_written_makes_nothing(tmp_path):
    """A fresh run's journal is read (and max_queries checked) before its run folder exists:
    reading makes no file; the first answer stored makes it."""
    path = tmp_path / "run" / "answers.sqlite"
    with AnswerJournal(path) as journal:
        target = JournaledTarget(FunctionTarget(str.upper, "up"), journal, max_queries=2)
        assert target.check(["a", "b", "a"]) == ["a", "b"] and journal.count(target.key) == 0
        with pytest.raises(ConfigError, match="3 new queries"):
            target.check(["a", "b", "c"])
        assert not path.parent.exists()
        path.parent.mkdir()
        assert [a.text for a in target.answer(["a"])] == ["A"]
        assert path.is_file() and journal.count(target.key) == 1


def test_estimate_cost_by_hand():
    est = estimate_cost(["abcd", "abcde"], extra_prompt="xy", max_tokens=10)
    assert (est.queries, est.prompt_tokens, est.answer_tokens) == (2, 2 + math.ceil(7 / 4), 20)
    assert "characters / 4" in est.describe() and "2 queries" in est.describe()
    words = estimate_cost(["one two", "three"], tokenizer=str.split)
    assert (words.prompt_tokens, words.how) == (3, "tokenizer")
    assert "counted by the tokenizer" in words.describe()


def test_each_answer_is_committed_as_it_comes_and_ctrl_c_loses_none(tmp_path):
    """A function target interrupted (Ctrl-C) after 4 of 8 answers: the 4 are journaled and a
    resume asks only the other 4; a chain interrupted after its last answer asks none again."""
    questions = QUESTIONS[:8]
    calls: list[str] = []

    def stops_after(n):
        def fn(question):
            if len(calls) == n:
                calls.append("interrupted")
                raise KeyboardInterrupt
            calls.append(question)
            return question.upper()
        return fn

    with AnswerJournal(tmp_path / "a.db") as journal:
        with pytest.raises(KeyboardInterrupt):
            JournaledTarget(FunctionTarget(stops_after(4), "f"), journal).answer(questions)
        calls.clear()
        again = JournaledTarget(FunctionTarget(stops_after(99), "f"), journal)
        assert [a.text for a in again.answer(questions)] == [q.upper() for q in questions]
        assert calls == questions[4:] and (again.sent, again.replayed) == (4, 4)


class _Batch:
    """A target that returns its whole batch at once (no reports_answers)."""

    def __init__(self):
        self.asked: list[str] = []

    def answer(self, questions):
        self.asked += questions
        return [TargetAnswer(q[::-1]) for q in questions]

    def describe(self):
        return "batch"

    def fingerprint(self):
        return "batch"


def test_a_batch_returned_as_ctrl_c_arrives_is_kept(tmp_path, monkeypatch):
    """Ctrl-C right after a whole batch came back (as it is being stored): the batch is in the
    journal, all of it, and nothing is asked again."""
    real = AnswerJournal.put_many
    hits = []

    def interrupted(self, target, answers):
        if not hits:
            hits.append(1)
            raise KeyboardInterrupt  # before anything was stored
        return real(self, target, answers)

    monkeypatch.setattr(AnswerJournal, "put_many", interrupted)
    batch = _Batch()
    with AnswerJournal(tmp_path / "a.db") as journal:
        with pytest.raises(KeyboardInterrupt):
            JournaledTarget(batch, journal).answer(QUESTIONS[:8])
        assert journal.count("batch") == 8
        JournaledTarget(batch, journal).answer(QUESTIONS[:8])
    assert batch.asked == QUESTIONS[:8]


def _killed(path: str) -> None:
    """Answers 8 questions into the journal at ``path``; SIGKILL during the 5th."""
    import signal

    n = [0]

    def fn(q):
        n[0] += 1
        if n[0] == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return q.upper()

    with AnswerJournal(path) as journal:
        JournaledTarget(FunctionTarget(fn, "f"), journal).answer([f"q{k}" for k in range(8)])


def test_kill_9_after_4_answers_keeps_the_4(tmp_path):
    """A process of its own, killed: forked from this one (no interpreter to start, no torch to
    import again), the journal opened there."""
    import multiprocessing

    path = tmp_path / "a.db"
    child = multiprocessing.get_context("fork").Process(target=_killed, args=(str(path),))
    child.start()
    child.join(timeout=300)
    assert child.exitcode == -9
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT question FROM answers").fetchall()
    assert sorted(q for q, in rows) == ["q0", "q1", "q2", "q3"]


def test_a_tampered_row_is_not_scored_but_asked_again(tmp_path):
    """A row edited after it was written (another answer, text that is not JSON, the digest
    wiped) fails its keyed digest: a warning says so, its question is asked again and the row
    replaced; the rows left alone are read back."""
    asked: list[str] = []

    def fn(question):
        asked.append(question)
        return question.upper()

    path = tmp_path / "a.db"
    with AnswerJournal(path) as journal:
        JournaledTarget(FunctionTarget(fn, "f"), journal).answer(QUESTIONS[:4])
    key = tmp_path / "a.db.key"
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    with sqlite3.connect(path) as db:
        db.execute("UPDATE answers SET answer = ? WHERE question = ?",
                   ('{"text": "the secret is 1234", "document_ids": null, "documents": null}',
                    QUESTIONS[0]))
        db.execute("UPDATE answers SET answer = 'not json {' WHERE question = ?", (QUESTIONS[1],))
        db.execute("UPDATE answers SET digest = NULL WHERE question = ?", (QUESTIONS[2],))
    asked.clear()
    with AnswerJournal(path) as journal:
        again = JournaledTarget(FunctionTarget(fn, "f"), journal)
        with pytest.warns(UserWarning, match=r"a.db: 3 stored answer\(s\) do not match their "
                          r"digest .*a.db.key.*asked again"):
            got = again.answer(QUESTIONS[:4])
        assert [a.text for a in got] == [q.upper() for q in QUESTIONS[:4]]
        assert asked == QUESTIONS[:3] and again.replayed == 1
        assert journal.count(again.key) == 4  # replaced, and they verify now
        assert again.answer(QUESTIONS[:4]) == got and asked == QUESTIONS[:3]


def test_a_journal_without_its_key_asks_again(tmp_path):
    path = tmp_path / "a.db"
    with AnswerJournal(path) as journal:
        JournaledTarget(FunctionTarget(str.upper, "f"), journal).answer(["a", "b"])
    (tmp_path / "a.db.key").unlink()
    with AnswerJournal(path) as journal, pytest.warns(UserWarning, match="2 stored answer"):
        again = JournaledTarget(FunctionTarget(str.upper, "f"), journal)
        assert [a.text for a in again.answer(["a", "b"])] == ["A", "B"]
        assert again.sent == 2


def test_functions_of_one_name_are_different_targets(tmp_path):
    def answer(question):
        return "one"

    first = FunctionTarget(answer, "answer")

    def answer(question):  # noqa: F811 - the same name, other code
        return "two"

    second = FunctionTarget(answer, "answer")
    assert first.fingerprint() != second.fingerprint()
    assert first.fingerprint() == FunctionTarget(first.fn, "answer").fingerprint()
    with AnswerJournal(tmp_path / "a.db") as journal:
        assert JournaledTarget(first, journal).answer(["q"])[0].text == "one"
        assert JournaledTarget(second, journal).answer(["q"])[0].text == "two"


def test_a_function_compiled_under_another_files_name_is_known_by_its_bytecode(tmp_path):
    """A function defined in a block run from a page (compiled under the page's name, as the
    docs' blocks are): inspect cannot parse that file as Python, so the identity is its
    bytecode, stable and distinct, not a traceback."""
    page = tmp_path / "page.md"
    page.write_text("# A page\n\nSome prose (with an open bracket\n\n" * 3)
    made = []
    for body in ("'one'", "'two'", "'one'"):
        space: dict = {}
        exec(compile(f"def answer(question):\n    return {body}\n", str(page), "exec"), space)
        made.append(FunctionTarget(space["answer"], "answer").fingerprint())
    assert made[0] == made[2] != made[1]


def test_a_verified_row_that_is_not_json_is_one_line(tmp_path):
    path = tmp_path / "a.db"
    with AnswerJournal(path) as journal:
        target = JournaledTarget(FunctionTarget(str.upper, "f"), journal)
        target.answer(["a"])
        digest = journal._digest(target.key, "a", "not json {")  # as if ctxleak wrote it
    with sqlite3.connect(path) as db:
        db.execute("UPDATE answers SET answer = 'not json {', digest = ?", (digest,))
    with AnswerJournal(path) as journal, pytest.raises(InputError) as info:
        journal.get(target.key, ["a"])
    assert "a.db: the stored answer to 'a' is not an answer as ctxleak writes it" in \
        str(info.value) and "\n" not in str(info.value)


def test_an_answer_past_the_limit_is_cut_with_a_warning(tmp_path, monkeypatch):
    import ctxleak.targets.journal as journal_module

    warned: list[str] = []
    monkeypatch.setattr(journal_module, "warn", lambda message, *a, **k: warned.append(message))
    with AnswerJournal(tmp_path / "a.db") as journal:
        target = JournaledTarget(FunctionTarget(lambda q: q * 50, "long"), journal,
                                 max_answer_chars=100)
        got = target.answer(["short", "a longer question"])  # 250 and 850 characters
        assert got[0].text == "short" * 20 and got[1].text == ("a longer question" * 50)[:100]
        assert target.answer(["a longer question"])[0].text == got[1].text  # stored cut
    assert warned == [f"the answer to {q!r} has {n} characters: cut to the first 100 (the "
                      "most an answer keeps)" for q, n in (("short", 250),
                                                           ("a longer question", 850))]


def test_a_child_the_target_forks_still_ends_with_os_exit(tmp_path):
    """os._exit raises only in the audit's own process: a child the target's code forks (a
    process pool) ends as it asks, and os._exit is itself again after the call."""
    import signal

    real = os._exit

    def forks(question):
        pid = os.fork()
        if pid == 0:  # the child
            try:
                os._exit(7)
            finally:  # had os._exit raised here, the child must not go on as a test process
                os.kill(os.getpid(), signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return f"child exit {os.waitstatus_to_exitcode(status)}"

    with AnswerJournal(tmp_path / "a.db") as journal:
        got = JournaledTarget(FunctionTarget(forks, "forks"), journal).answer(["q"])
    assert got[0].text == "child exit 7" and os._exit is real
