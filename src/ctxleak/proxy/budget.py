"""The privacy proxy's ledger of ε spent per document, across requests: an embedded SQLite
database by default, PostgreSQL (psycopg 3) when several proxy replicas share it.

Bounded Context Influence Decoding (Estimating Privacy Leakage of Augmented Contextual Knowledge
in Language Models, App. B, Alg. 1, Thm B.1) makes each released token ε-DP with respect to any
one document of the context; by basic composition an answer of T released tokens (the stopping
EOS included) spends T·ε of every document it was given, and a document's answers add up. The
ledger keeps that sum per document id and refuses a reservation that would pass the document's
budget.

Every answer is paid in two steps, each one transaction:

1. :meth:`BudgetLedger.reserve` charges the most the answer can spend (ε × (max_tokens + 1)) to
   each document that still has that much budget left, atomically (SQLite ``BEGIN IMMEDIATE``,
   PostgreSQL row locks), and records the reservation;
2. :meth:`BudgetLedger.settle` gives back what the answer did not spend and forgets the
   reservation.

A crash between the two leaves the reservation charged: a half-written answer never counts as
unspent. Plain CID (a fixed λ, no ε) has no guarantee; its data-dependent ex-post ε is recorded
in a column of its own (:meth:`BudgetLedger.record_ex_post`) and is not a budget unless the
operator says so.

This module imports neither torch nor the rest of the proxy (a crash test runs it alone).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ctxleak.errors import ConfigError

#: Slack for float sums: a reservation that passes a budget by less than this is granted.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Budgets:
    """The operator's budget per document: ``default`` ε for every document (None: no limit)
    and ``overrides`` by document id."""

    default: float | None = None
    overrides: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in [("budget", self.default), *self.overrides.items()]:
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ConfigError(f"the budget of {name!r} must be a finite number >= 0, "
                                  f"not {value}", param="budget")

    def of(self, doc_id: str) -> float | None:
        return self.overrides.get(doc_id, self.default)


@dataclass(frozen=True)
class Reservation:
    """What :meth:`BudgetLedger.reserve` granted: the request, the amount charged to each granted
    document, and the documents whose budget could not cover it."""

    request_id: str
    amount: float
    granted: tuple[str, ...]
    exhausted: tuple[str, ...]


@dataclass(frozen=True)
class DocumentSpend:
    """One document's row: guaranteed ε charged (settled answers plus open reservations), how
    much of it is still reserved, and the ex-post ε of plain CID answers (not a guarantee)."""

    doc_id: str
    spent: float
    reserved: float
    ex_post: float


class BudgetLedger:
    """The ledger's operations; :class:`SQLiteLedger` and :class:`PostgresLedger` store it."""

    def reserve(self, request_id: str, doc_ids: Sequence[str], amount: float, budgets: Budgets,
                *, all_or_nothing: bool = False) -> Reservation:
        """Charge ``amount`` to each of ``doc_ids`` whose spent ε plus ``amount`` stays within its
        budget, in one transaction, and record the reservation under ``request_id``.
        ``all_or_nothing``: when any document is exhausted, charge none of them."""
        if not math.isfinite(amount) or amount < 0:
            raise ConfigError(f"a reservation must be a finite number >= 0, not {amount}",
                              param="amount")
        unique = list(dict.fromkeys(doc_ids))
        return self._reserve(request_id, unique, float(amount), budgets, all_or_nothing)

    def settle(self, request_id: str, spent: float) -> None:
        """The answer of ``request_id`` spent ``spent`` per document: give back the rest of its
        reservation (or charge the excess, for ex-post charging, which reserves 0) and close it,
        in one transaction. An unknown or already settled request changes nothing."""
        if not math.isfinite(spent) or spent < 0:
            raise ConfigError(f"the ε spent must be a finite number >= 0, not {spent}",
                              param="spent")
        self._settle(request_id, float(spent))

    def record_ex_post(self, doc_ids: Sequence[str], eps_ex_post: float) -> None:
        """Add a plain CID answer's ex-post ε (about this context alone, not a guarantee)."""
        self._ex_post(list(dict.fromkeys(doc_ids)), float(eps_ex_post))

    # the storage's part: each store opens ``_db`` (a DB-API connection) and ``_lock``, and
    # writes the transaction and the reservation, whose row locking differs; the rest is shared
    _db: Any
    _lock: threading.Lock
    #: what a settlement adds to its SELECT to lock the reservation's rows (PostgreSQL)
    _LOCK_ROWS = ""

    def _sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in the driver's parameter style."""
        return statement

    def _transaction(self, body: Callable[[Any], Any]) -> Any:
        raise NotImplementedError

    def _reserve(self, request_id: str, doc_ids: list[str], amount: float, budgets: Budgets,
                 all_or_nothing: bool) -> Reservation:
        raise NotImplementedError

    def _settle(self, request_id: str, spent: float) -> None:
        def body(db: Any) -> None:
            rows = db.execute(self._sql("SELECT doc_id, amount FROM ctxleak_reservation WHERE "
                                        "request_id = ?" + self._LOCK_ROWS),
                              (request_id,)).fetchall()
            for doc, amount in rows:
                db.execute(self._sql("UPDATE ctxleak_spend SET spent = spent - ? WHERE "
                                     "doc_id = ?"), (float(amount) - spent, doc))
            db.execute(self._sql("DELETE FROM ctxleak_reservation WHERE request_id = ?"),
                       (request_id,))

        self._transaction(body)

    def _ex_post(self, doc_ids: list[str], eps: float) -> None:
        def body(db: Any) -> None:
            for doc in sorted(doc_ids):  # in id order: two writers never deadlock
                db.execute(self._sql(
                    "INSERT INTO ctxleak_spend (doc_id, ex_post) VALUES (?, ?) ON CONFLICT "
                    "(doc_id) DO UPDATE SET ex_post = ctxleak_spend.ex_post + excluded.ex_post"),
                    (doc, eps))

        self._transaction(body)

    def document(self, doc_id: str) -> DocumentSpend:
        """What ``doc_id`` has spent (reservations included), holds in open reservations and
        has spent ex post."""
        with self._lock:
            row = self._db.execute(self._sql("SELECT spent, ex_post FROM ctxleak_spend WHERE "
                                             "doc_id = ?"), (doc_id,)).fetchone()
            held = self._db.execute(self._sql("SELECT COALESCE(SUM(amount), 0) FROM "
                                              "ctxleak_reservation WHERE doc_id = ?"),
                                    (doc_id,)).fetchone()
        spent, ex_post = (float(row[0]), float(row[1])) if row else (0.0, 0.0)
        return DocumentSpend(doc_id, spent, float(held[0]) if held else 0.0, ex_post)

    def open_reservations(self) -> list[tuple[str, str, float]]:
        """(request id, document id, amount) of every reservation not settled."""
        with self._lock:
            rows = self._db.execute("SELECT request_id, doc_id, amount FROM ctxleak_reservation "
                                    "ORDER BY created, request_id, doc_id").fetchall()
        return [(str(r), str(d), float(a)) for r, d, a in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _decide(doc_ids: list[str], amount: float, budgets: Budgets, spent_of: Callable[[str], float],
            all_or_nothing: bool) -> tuple[list[str], list[str]]:
    granted, exhausted = [], []
    for doc in doc_ids:
        budget = budgets.of(doc)
        if budget is None:
            fits = True
        elif amount > 0:
            fits = spent_of(doc) + amount <= budget + TOLERANCE
        else:  # an answer that reserves nothing (ex-post charging) needs some budget left
            fits = spent_of(doc) < budget
        if fits:
            granted.append(doc)
        else:
            exhausted.append(doc)
    if all_or_nothing and exhausted:
        granted = []
    return granted, exhausted


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ctxleak_spend (doc_id TEXT PRIMARY KEY, "
    "spent DOUBLE PRECISION NOT NULL DEFAULT 0, ex_post DOUBLE PRECISION NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS ctxleak_reservation (request_id TEXT NOT NULL, "
    "doc_id TEXT NOT NULL, amount DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (request_id, doc_id))",
)


class SQLiteLedger(BudgetLedger):
    """The ledger in one SQLite file (WAL journal, full sync): each reservation and each
    settlement one ``BEGIN IMMEDIATE`` transaction, so two proxies or threads on the same file
    never both pass a budget."""

    def __init__(self, path: str | Path, timeout: float = 30.0) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise ConfigError(f"the ledger {self.path} is not a regular file", param="ledger")
        if not self.path.parent.is_dir():
            raise ConfigError(f"the ledger's folder {self.path.parent} does not exist",
                              param="ledger")
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as fh:
                if fh.read(16) != b"SQLite format 3\x00":
                    raise ConfigError(f"{self.path} is not an SQLite database (ctxleak does not "
                                      "overwrite it): name a new file", param="ledger")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def _transaction(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                out = body(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return out

    def _reserve(self, request_id: str, doc_ids: list[str], amount: float, budgets: Budgets,
                 all_or_nothing: bool) -> Reservation:
        def body(db: sqlite3.Connection) -> Reservation:
            def spent_of(doc: str) -> float:
                row = db.execute("SELECT spent FROM ctxleak_spend WHERE doc_id = ?",
                                 (doc,)).fetchone()
                return float(row[0]) if row else 0.0

            granted, exhausted = _decide(doc_ids, amount, budgets, spent_of, all_or_nothing)
            now = time.time()
            for doc in granted:
                db.execute("INSERT INTO ctxleak_spend (doc_id, spent) VALUES (?, ?) ON CONFLICT "
                           "(doc_id) DO UPDATE SET spent = spent + excluded.spent", (doc, amount))
                db.execute("INSERT INTO ctxleak_reservation VALUES (?, ?, ?, ?)",
                           (request_id, doc, amount, now))
            return Reservation(request_id, amount, tuple(granted), tuple(exhausted))

        return self._transaction(body)


class PostgresLedger(BudgetLedger):
    """The ledger in PostgreSQL (psycopg 3), shared by several proxy replicas: a reservation
    locks its documents' rows (``SELECT … FOR UPDATE``, in id order so two never deadlock)
    inside one transaction."""

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the serve extra installs it
            raise ConfigError("a PostgreSQL ledger needs psycopg: pip install 'ctxleak[serve]'",
                              param="ledger") from exc
        self._psycopg = psycopg
        self._lock = threading.Lock()
        try:
            self._db = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as exc:
            raise ConfigError(f"cannot connect to the PostgreSQL ledger: {exc}",
                              param="ledger") from exc
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(7405911)")  # one schema creator
            for statement in _SCHEMA:
                self._db.execute(statement)

    _LOCK_ROWS = " ORDER BY doc_id FOR UPDATE"

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")  # psycopg's parameter style

    def _transaction(self, body: Callable[[Any], Any]) -> Any:
        with self._lock, self._db.transaction():
            return body(self._db)

    def _reserve(self, request_id: str, doc_ids: list[str], amount: float, budgets: Budgets,
                 all_or_nothing: bool) -> Reservation:
        def body(db: Any) -> Reservation:
            for doc in sorted(doc_ids):
                db.execute("INSERT INTO ctxleak_spend (doc_id) VALUES (%s) ON CONFLICT DO NOTHING",
                           (doc,))
            rows = db.execute("SELECT doc_id, spent FROM ctxleak_spend WHERE doc_id = ANY(%s) "
                              "ORDER BY doc_id FOR UPDATE", (sorted(doc_ids),)).fetchall()
            spent = {str(d): float(s) for d, s in rows}
            granted, exhausted = _decide(doc_ids, amount, budgets, lambda d: spent.get(d, 0.0),
                                         all_or_nothing)
            now = time.time()
            for doc in granted:
                db.execute("UPDATE ctxleak_spend SET spent = spent + %s WHERE doc_id = %s",
                           (amount, doc))
                db.execute("INSERT INTO ctxleak_reservation VALUES (%s, %s, %s, %s)",
                           (request_id, doc, amount, now))
            return Reservation(request_id, amount, tuple(granted), tuple(exhausted))

        return self._transaction(body)


def open_ledger(url: str) -> BudgetLedger:
    """The ledger at ``url``: ``sqlite:///relative/file.db`` or ``sqlite:////absolute/file.db``
    (SQLAlchemy's convention; a plain path too) or ``postgresql://…`` (also ``postgres://``)."""
    scheme = urlsplit(url).scheme if "://" in url else ""
    if scheme in ("postgresql", "postgres"):
        return PostgresLedger(url)
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise ConfigError(f"a SQLite ledger URL is sqlite:///relative.db or "
                              f"sqlite:////absolute/path.db, not {url!r}", param="ledger")
        return SQLiteLedger(unquote(url[len("sqlite:///"):]))
    if scheme:
        raise ConfigError(f"unknown ledger {url!r}: give sqlite:///path.db or postgresql://…",
                          param="ledger")
    return SQLiteLedger(url)
