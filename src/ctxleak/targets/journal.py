"""What an audit of a paid or slow target has already been answered, kept across processes, and
what a run will cost before it starts.

:class:`AnswerJournal` is a SQLite database (write-ahead log) with one row per (target
fingerprint, question): the answer as JSON (text, retrieved document ids and texts), committed
as it is stored (the file made with the first answer). :class:`JournaledTarget` wraps a target
before the runner sees it, as lm-evaluation-harness's ``CachingLM`` wraps a model
(:func:`ctxleak.run.runner.run_method`, over a run folder's :data:`JOURNAL_FILE`): it answers
from the journal first and sends only the questions it does not hold, each distinct question
once, ``chunk`` at a time, committing each answer as soon as it is known (a target that reports
its answers one by one, ``reports_answers`` (:mod:`.base`), has each committed before the next is
asked, so a kill -9 loses none it gave; one that returns a whole batch has the batch committed
at once, in one transaction, even when Ctrl-C arrives as it returns); when the target fails
mid-chunk, the answers it did give (:attr:`~.base.TargetError.answered`) are stored before the
error goes on. A resumed audit thus sends no question twice and reads back the very answers of
the first run. ``max_queries`` bounds the queries the journal holds for the target plus those
still to send: :meth:`JournaledTarget.check` refuses questions that would pass it before
anything is sent (a run's whole list before its first question, each call its own).

:func:`estimate_cost` counts what a run sends: queries × prompt tokens, by a tokenizer where
one is given, else by the stated estimate of 4 characters per token (:func:`cost_line`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from ctxleak.domains import whole
from ctxleak.errors import ConfigError, InputError, warn
from ctxleak.mitigations.mechanisms import Claim
from ctxleak.targets.base import Target, TargetAnswer, TargetError, exit_words, no_exit
from ctxleak.targets.rag import RAGApp, RAGPrompt

#: The file of a run folder that keeps every answer its target gave.
JOURNAL_FILE = "answers.sqlite"
#: Beside the journal, the random key of its rows' digests (``answers.sqlite.key``).
KEY_SUFFIX = ".key"

_SCHEMA = """CREATE TABLE IF NOT EXISTS answers (
    target TEXT NOT NULL, question TEXT NOT NULL, answer TEXT NOT NULL, digest TEXT,
    PRIMARY KEY (target, question))"""


def answer_json(answer: TargetAnswer) -> str:
    """An answer as the journal stores it (keys sorted: the same answer, the same bytes; its
    claim only where it has one)."""
    claim = {} if answer.claim is None else {"claim": asdict(answer.claim)}
    return json.dumps({"text": answer.text,
                       "document_ids": None if answer.document_ids is None
                       else list(answer.document_ids),
                       "documents": None if answer.documents is None else list(answer.documents),
                       **claim}, sort_keys=True, ensure_ascii=False)


def answer_from_json(text: str) -> TargetAnswer:
    """The answer :func:`answer_json` stored."""
    got = json.loads(text)
    ids, docs, claim = got.get("document_ids"), got.get("documents"), got.get("claim")
    return TargetAnswer(got["text"], None if ids is None else tuple(ids),
                        None if docs is None else tuple(docs),
                        None if claim is None else Claim(**claim))


class AnswerJournal:
    """The answers a target gave, by (target fingerprint, question), in SQLite at ``path``
    (opened at once where the file is there, else made with the first answer stored).

    Each row carries a keyed digest (BLAKE2b, keyed by a random key kept beside the database
    in ``<path>.key``, mode 0600, made with it) over its target, question and answer: a row
    edited by hand, or written without this key, does not verify, and is not used (a warning
    says how many; the question is asked again and the row replaced). It guards against edits
    and mix-ups, not against someone who can read the key."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.key_path = self.path.with_name(self.path.name + KEY_SUFFIX)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._key: bytes | None = None
        self._warned: set[tuple[str, str]] = set()
        if self.path.exists():
            self._open()

    def _open(self) -> sqlite3.Connection:
        """The database, opened (and made) on first use."""
        if self._db is None:
            try:
                # made 0600 as every file of a run folder (the answers are the target's
                # text); SQLite gives its -wal and -shm files the database's mode
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
                self._db = sqlite3.connect(str(self.path), check_same_thread=False,
                                           isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute(_SCHEMA)
                columns = {row[1] for row in self._db.execute("PRAGMA table_info(answers)")}
                if "digest" not in columns:  # a journal of a ctxleak that kept no digests
                    self._db.execute("ALTER TABLE answers ADD COLUMN digest TEXT")
            except sqlite3.DatabaseError as exc:
                raise InputError(f"not an answer journal (SQLite): {exc}",
                                 file=str(self.path)) from None
            self._key = self._read_key(create=False)
        return self._db

    def _read_key(self, *, create: bool) -> bytes | None:
        """The folder's digest key (None: there is none yet and ``create`` is off)."""
        try:
            key = self.key_path.read_bytes()
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # made a moment ago by another process
                return self.key_path.read_bytes()
            key = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as out:
                out.write(key)
                out.flush()
                os.fsync(out.fileno())
            return key
        except OSError as exc:
            raise InputError(f"the journal's key cannot be read ({exc.strerror})",
                             file=str(self.key_path)) from None
        return key

    def _digest(self, target: str, question: str, answer: str) -> str:
        assert self._key is not None
        data = json.dumps([target, question, answer], ensure_ascii=False)
        return hashlib.blake2b(data.encode("utf-8", "surrogatepass"), key=self._key,
                               digest_size=32, person=b"ctxleak-answers").hexdigest()

    def _verifies(self, target: str, question: str, answer: str, digest: str | None) -> bool:
        return self._key is not None and digest is not None and \
            hmac.compare_digest(self._digest(target, question, answer), digest)

    def _rows(self, target: str, questions: Sequence[str]) -> list[tuple[str, str, str | None]]:
        """(question, answer, digest) of the rows of ``questions`` (the lock held)."""
        assert self._db is not None
        rows: list[tuple[str, str, str | None]] = []
        for start in range(0, len(questions), 500):  # SQLite's bound on parameters
            part = questions[start:start + 500]
            rows += self._db.execute(
                f"SELECT question, answer, digest FROM answers WHERE target = ? AND question "
                f"IN ({', '.join('?' * len(part))})", [target, *part]).fetchall()
        return rows

    def get(self, target: str, questions: Sequence[str]) -> dict[str, TargetAnswer]:
        """The stored answers of those ``questions`` the journal holds for ``target``, each
        verified by its digest (those that do not verify are left out, with a warning)."""
        out: dict[str, TargetAnswer] = {}
        bad: list[str] = []
        with self._lock:
            if self._db is None:
                return out
            for question, answer, digest in self._rows(target, list(dict.fromkeys(questions))):
                if not self._verifies(target, question, answer, digest):
                    if (target, question) not in self._warned:
                        self._warned.add((target, question))
                        bad.append(question)
                    continue
                try:
                    out[question] = answer_from_json(answer)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise InputError(f"the stored answer to {question[:60]!r} is not an "
                                     f"answer as ctxleak writes it ({type(exc).__name__}: "
                                     f"{exc}); start a new output=...",
                                     file=str(self.path)) from None
        if bad:
            warn(f"{self.path}: {len(bad)} stored answer(s) do not match their digest (edited "
                 f"after they were written, or written without this folder's key "
                 f"{self.key_path.name}), first to {bad[0][:60]!r}: not used; their questions "
                 "are asked again")
        return out

    def put(self, target: str, question: str, answer: TargetAnswer) -> None:
        """Store one answer, committed at once (an answer already stored is kept)."""
        self.put_many(target, [(question, answer)])

    def put_many(self, target: str, answers: Sequence[tuple[str, TargetAnswer]]) -> None:
        """Store (question, answer) pairs in one transaction: all committed, or none (an
        answer already stored is kept where it verifies, else replaced)."""
        texts = {question: answer_json(answer) for question, answer in answers}
        if not texts:
            return
        with self._lock:
            db = self._open()
            if self._key is None:
                self._key = self._read_key(create=True)
            with db:  # one transaction: committed on leaving, rolled back on an error
                db.execute("BEGIN")
                kept = {q for q, a, d in self._rows(target, list(texts))
                        if self._verifies(target, q, a, d)}
                db.executemany("INSERT OR REPLACE INTO answers (target, question, answer, "
                               "digest) VALUES (?, ?, ?, ?)",
                               [(target, q, a, self._digest(target, q, a))
                                for q, a in texts.items() if q not in kept])

    def count(self, target: str) -> int:
        """How many answers the journal holds for ``target`` (that verify)."""
        with self._lock:
            if self._db is None:
                return 0
            rows = self._db.execute("SELECT question, answer, digest FROM answers WHERE "
                                    "target = ?", (target,)).fetchall()
            return sum(1 for q, a, d in rows if self._verifies(target, q, a, d))

    def total(self) -> int:
        """How many answers the journal holds, for every target."""
        with self._lock:
            return 0 if self._db is None else int(self._db.execute(
                "SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> AnswerJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SURROGATE = re.compile("[\ud800-\udfff]")

#: The most characters of one answer's text the journal keeps (1,000,000, about 1 MB of
#: English): a longer one (a function that answers 20 MB) is cut to it, with a warning naming
#: the question, so that it neither fills the run folder nor stalls the attack's matching.
MAX_ANSWER_CHARS = 1_000_000


def checked(answer: TargetAnswer, question: str,
            max_chars: int = MAX_ANSWER_CHARS) -> TargetAnswer:
    """``answer`` as the journal stores it: its text cut to ``max_chars`` characters, and a
    lone surrogate (``"\\ud800"``, which no UTF-8 file can hold) in its text or documents
    replaced by U+FFFD, each with a warning naming the question; the answer is kept, as a
    reader of it expects, not refused."""
    if len(answer.text) > max_chars:
        warn(f"the answer to {question[:60]!r} has {len(answer.text):,} characters: cut to "
             f"the first {max_chars:,} (the most an answer keeps)")
        answer = replace(answer, text=answer.text[:max_chars])
    parts = [answer.text, *(answer.document_ids or ()), *(answer.documents or ())]
    if not any(_SURROGATE.search(p) for p in parts):
        return answer
    warn(f"the answer to {question[:60]!r} holds lone surrogates (text no UTF-8 file can "
         "hold): kept with each replaced by U+FFFD")

    def fix(texts: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if texts is None else tuple(_SURROGATE.sub("\ufffd", t) for t in texts)

    return replace(answer, text=_SURROGATE.sub("\ufffd", answer.text),
                   document_ids=fix(answer.document_ids), documents=fix(answer.documents))


class JournaledTarget:
    """``target`` answered from ``journal`` first (see the module docstring); ``sent``: the
    queries this object has sent, ``replayed``: the answers it read back."""

    def __init__(self, target: Target, journal: AnswerJournal, max_queries: int | None = None,
                 *, chunk: int = 16, max_answer_chars: int = MAX_ANSWER_CHARS) -> None:
        max_queries = whole(max_queries, "max_queries", minimum=0, allow_none=True)
        chunk = whole(chunk, "chunk", minimum=1)
        max_answer_chars = whole(max_answer_chars, "max_answer_chars", minimum=1)
        self.max_answer_chars = max_answer_chars
        self.target, self.journal, self.max_queries, self.chunk = target, journal, max_queries, chunk
        self.key = target.fingerprint()
        self.sent = self.replayed = 0

    def check(self, questions: Sequence[str]) -> list[str]:
        """The distinct questions of ``questions`` the journal does not hold, what a call sends,
        in order; refused (:class:`ConfigError`, nothing sent) when they would take the queries
        the journal holds for the target past ``max_queries``."""
        have = self.journal.get(self.key, questions)
        todo = [q for q in dict.fromkeys(questions) if q not in have]
        if self.max_queries is not None:
            held = self.journal.count(self.key)
            if held + len(todo) > self.max_queries:
                raise ConfigError(
                    f"max_queries: these questions need {len(todo)} new queries to the target "
                    f"and the journal holds {held} already: {held + len(todo)} in all, more "
                    f"than the {self.max_queries} allowed (nothing was sent)",
                    param="max_queries")
        return todo

    def answer(self, questions: Sequence[str]) -> list[TargetAnswer]:
        todo = self.check(questions)
        for start in range(0, len(todo), self.chunk):
            self._send(todo[start:start + self.chunk], questions)
        have = self.journal.get(self.key, questions)
        sending = set(todo)
        self.replayed += sum(1 for q in questions if q not in sending)
        return [have[q] for q in questions]

    def _send(self, part: list[str], questions: Sequence[str]) -> None:
        """Send ``part``, storing what comes back, even when the target fails mid-way."""
        self.sent += len(part)
        got: list[TargetAnswer] | None = None
        kept: set[int] = set()

        def keep(k: int, answer: TargetAnswer) -> None:  # committed as soon as it is known
            if 0 <= k < len(part) and k not in kept:
                self.journal.put(self.key, part[k], self._checked(answer, part[k]))
                kept.add(k)

        def keep_all(answers: Sequence[TargetAnswer]) -> None:  # those not reported, at once
            self.journal.put_many(self.key, [(q, self._checked(a, q)) for k, (q, a) in
                                             enumerate(zip(part, answers)) if k not in kept])
            kept.update(range(len(answers)))

        try:
            try:
                with no_exit():  # a target of the user's own, an answerer of a RAG app
                    if getattr(self.target, "reports_answers", False):
                        got = self.target.answer(part, on_answer=keep)  # type: ignore[call-arg]
                    else:
                        got = self.target.answer(part)
            except SystemExit as exc:
                self._failed(TargetError(f"{self.target.describe()} {exit_words(exc)}"), part,
                             questions)
            except TargetError as exc:
                self._failed(exc, part, questions)
            if len(got) != len(part):
                raise TargetError(f"{self.target.describe()} gave {len(got)} answers to "
                                  f"{len(part)} questions")
            keep_all(got)
        except KeyboardInterrupt:  # Ctrl-C as the batch returned or was stored: it is kept
            if got is not None and len(got) == len(part):  # (one transaction: again is safe)
                keep_all(got)
            raise

    def _failed(self, exc: TargetError, part: list[str], questions: Sequence[str]) -> NoReturn:
        """Store the answers the target gave before failing, and fail naming the question
        among ``questions``."""
        self.journal.put_many(self.key, [(part[k], self._checked(a, part[k]))
                                         for k, a in exc.answered.items()
                                         if 0 <= k < len(part)])
        index = exc.index
        if index is not None and 0 <= index < len(part):
            index = list(questions).index(part[index])
        have = self.journal.get(self.key, questions)
        raise TargetError(f"{exc} (numbered among the {len(part)} questions sent together;"
                          f" the journal {self.journal.path.name} keeps the "
                          f"{self.journal.count(self.key)} answers had: run again to go on)",
                          index=index, answered={k: have[q] for k, q in enumerate(questions)
                                                 if q in have}) from exc

    def _checked(self, answer: TargetAnswer, question: str) -> TargetAnswer:
        return checked(answer, question, self.max_answer_chars)

    def describe(self) -> str:
        return self.target.describe()

    def fingerprint(self) -> str:
        return self.key


@dataclass(frozen=True)
class CostEstimate:
    """What a run sends: ``queries``, their ``prompt_tokens`` in all (``how``: counted by a
    tokenizer, or estimated as characters / 4) and at most ``answer_tokens``."""

    queries: int
    prompt_tokens: int
    how: str
    answer_tokens: int | None = None

    def describe(self) -> str:
        """One line for the console, before a paid run starts."""
        way = "counted by the tokenizer" if self.how == "tokenizer" else \
            "estimated as characters / 4: no tokenizer given"
        out = f"{self.queries:,} queries, {self.prompt_tokens:,} prompt tokens in all ({way})"
        if self.answer_tokens is not None:
            out += f", at most {self.answer_tokens:,} answer tokens"
        return out


def cost_line(target: Target, questions: Sequence[str]) -> str:
    """What asking ``questions`` of ``target`` sends, in one line (:func:`estimate_cost`): a
    RAG app's filled prompts (its retrieved documents included), their tokens counted by its
    model where ctxleak holds it; a chat endpoint's system message with each question; else the
    questions; the answer tokens where the target bounds them (``max_tokens``). A question
    asked twice is sent once (:class:`JournaledTarget`), so it is counted once, as the
    ``max_queries`` refusal counts."""
    questions = list(dict.fromkeys(questions))
    encode, system = None, getattr(target, "system", None)
    if isinstance(target, RAGApp):
        encode = getattr(target.model, "encode", None)
        questions = ["\n".join(m["content"] for m in RAGPrompt(q, target.retrieve(q),
                                                             target.messages).filled())
                     for q in questions]
    elif isinstance(system, str):
        questions = [f"{system}\n{q}" for q in questions]
    bound = getattr(target, "max_tokens", None)
    cost = estimate_cost(questions, tokenizer=encode, max_tokens=bound)
    return f"cost estimate for {target.describe()}: {cost.describe()}"


def estimate_cost(questions: Sequence[str], *, tokenizer: Any = None, extra_prompt: str = "",
                  max_tokens: int | None = None) -> CostEstimate:
    """Queries × prompt tokens of sending ``questions``, each with ``extra_prompt`` (a system
    message, the documents a RAG app adds); ``tokenizer``: anything with ``encode(text)`` or a
    function ``text -> ids`` (a Hugging Face tokenizer, tiktoken's encoding); without one,
    ⌈characters / 4⌉ per prompt. ``max_tokens``: the answer's bound, for the answer tokens."""
    count: Callable[[str], int]
    if tokenizer is None:
        count, how = (lambda text: math.ceil(len(text) / 4)), "chars/4"
    else:
        encode = getattr(tokenizer, "encode", tokenizer)
        count, how = (lambda text: len(encode(text))), "tokenizer"
    total = sum(count(extra_prompt + q) for q in questions)
    answers = None if max_tokens is None else max_tokens * len(questions)
    return CostEstimate(len(questions), total, how, answers)


__all__ = ["JOURNAL_FILE", "KEY_SUFFIX", "MAX_ANSWER_CHARS", "AnswerJournal", "CostEstimate",
           "JournaledTarget", "answer_from_json", "answer_json", "checked", "cost_line",
           "estimate_cost"]
