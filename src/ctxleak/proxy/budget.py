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
   PostgreSQL row locks), and records the reservation (with ``hold_rest``, each document's
   whole remaining budget: an answer whose spend has no bound known before it ends);
2. :meth:`BudgetLedger.settle` gives back what the answer did not spend and forgets the
   reservation.

A crash between the two leaves the reservation charged: a half-written answer never counts as
unspent.

A reservation made for a ``caller`` also adds what it holds to that caller's figure of each
document (table ``ctxleak_caller_spend``, in the unit of ``spent``), in the same transaction, and
its settlement gives the caller back what it gives the document; with a ``share`` a caller may
hold at most share × budget of a document (:func:`~ctxleak.proxy.budgets.share_hold`), so no one
caller can take a document's budget from the others.

Plain CID (a fixed λ, no ε) has no guarantee; its data-dependent ex-post ε is recorded
in a column of its own (:meth:`BudgetLedger.record_ex_post`) and is not a budget unless the
operator says so.

So a budget B allows :func:`answers_allowed` = ⌊B / (ε·(L+1))⌋ answers of up to L tokens at ε
per token, whatever they turn out to spend; answers that stop early give the rest back.

This module imports neither torch nor the rest of the proxy (a crash test runs it alone).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ctxleak.errors import ConfigError
from ctxleak.proxy.budgets import TOLERANCE, Budgets, answers_allowed
from ctxleak.proxy.ledger_common import EFFECTIVE, CommonSpend
from ctxleak.proxy.ledger_rows import (
    ADDED_RESERVATION,
    ADDED_SPEND,
    SCHEMA,
    Ask,
    DocumentSpend,
    Reservation,
    decide,
)

__all__ = ["TOLERANCE", "BudgetLedger", "Budgets", "DocumentSpend", "PostgresLedger",
           "Reservation", "SQLiteLedger", "answers_allowed", "open_ledger", "public_ledger_url"]

class BudgetLedger(CommonSpend):
    """The ledger's operations; :class:`SQLiteLedger` and :class:`PostgresLedger` store it."""

    def reserve(self, request_id: str, doc_ids: Sequence[str], amount: float | Mapping[str, float],
                budgets: Budgets, *, all_or_nothing: bool = False,
                classes: Mapping[str, str] | None = None, hold_rest: bool = False,
                caller: str | None = None, share: float | None = None) -> Reservation:
        """Charge ``amount`` to each of ``doc_ids`` whose spent ε plus ``amount`` stays within its
        budget, in one transaction, and record the reservation under ``request_id``. ``amount``
        may be a mapping: each document's own amount (its individual privacy loss in this
        answer; a document it does not name is asked 0).
        ``all_or_nothing``: when any document is exhausted, charge none of them. ``classes``:
        a class per document id, recorded where the ledger holds none (the ledger's wins: its
        budget is that class's). ``hold_rest``: hold each document's whole remaining budget
        (which must be > 0) instead of ``amount``. ``caller``: whose reservation it is (its
        holdings recorded per document); ``share``: with a caller, the fraction in (0, 1] of a
        document's budget one caller may hold and spend (None: no limit)."""
        ids = list(dict.fromkeys(doc_ids))
        amounts = {d: float(amount[d]) if d in amount else 0.0 for d in ids} \
            if isinstance(amount, Mapping) else {d: float(amount) for d in ids}
        for value in amounts.values():
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"a reservation must be a finite number >= 0, not {value}",
                                  param="amount")
        if share is not None and not 0 < share <= 1:
            raise ConfigError(f"a caller's share must be in (0, 1], not {share}", param="share")
        ask = Ask(ids, max(amounts.values(), default=0.0), budgets, all_or_nothing,
                   dict(classes or {}), hold_rest, amounts, caller, share)
        return self._reserve(request_id, ask)

    def settle(self, request_id: str, spent: float | Mapping[str, float]) -> None:
        """The answer of ``request_id`` spent ``spent`` per document (or each document its own,
        a mapping; a document it does not name spent what it holds): give back the rest of its
        reservation (or charge the excess, for ex-post charging, which reserves 0) and close it,
        in one transaction. An unknown or already settled request changes nothing."""
        values = spent.values() if isinstance(spent, Mapping) else [spent]
        for value in values:
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"the ε spent must be a finite number >= 0, not {value}",
                                  param="spent")
        self._settle(request_id, dict(spent) if isinstance(spent, Mapping) else float(spent))

    def record_ex_post(self, doc_ids: Sequence[str], eps_ex_post: float) -> None:
        """Add a plain CID answer's ex-post ε (about this context alone, not a guarantee)."""
        self._ex_post(list(dict.fromkeys(doc_ids)), float(eps_ex_post))

    # the storage's part: each store opens ``_db`` (a DB-API connection) and ``_lock``, and
    # writes the transaction and the reservation, whose row locking differs; the rest is shared
    # (``_db``, ``_lock``, ``_sql``, ``_transaction``, ``_rows_of``: :class:`CommonSpend`)
    unavailable: tuple[type[Exception], ...] = ()  # the driver's "store down" (HTTP 503)
    #: what a settlement adds to its SELECT to lock the reservation's rows (PostgreSQL)
    _LOCK_ROWS = ""

    def _caller_rows_of(self, db: Any, caller: str, doc_ids: list[str]
                        ) -> Callable[[str], float]:
        """What ``caller`` holds and spent of a document (its row, plus its common figure of
        the datastore the document is attached to), read inside the reservation's transaction
        (the document rows :meth:`_rows_of` read are locked: a caller's row of a document
        changes only with its document's)."""
        rows = {}
        for doc in doc_ids:
            row = db.execute(self._sql(
                "SELECT COALESCE((SELECT spent FROM ctxleak_caller_spend WHERE caller = ? AND "
                "doc_id = ?), 0) + COALESCE((SELECT c.spent FROM ctxleak_caller_common c JOIN "
                "ctxleak_spend s ON s.scope = c.scope WHERE c.caller = ? AND s.doc_id = ?), 0)"),
                (caller, doc, caller, doc)).fetchone()
            rows[doc] = float(row[0]) if row else 0.0
        return lambda d: rows.get(d, 0.0)

    def _reserve(self, request_id: str, ask: Ask) -> Reservation:
        def body(db: Any) -> Reservation:
            over_share: list[str] = []
            row_of = self._rows_of(db, ask.doc_ids)  # (first: PostgreSQL locks the rows)
            caller_of = None if ask.caller is None else \
                self._caller_rows_of(db, ask.caller, ask.doc_ids)
            granted, exhausted = decide(ask, row_of, caller_of, over_share)
            self._charge_rows(db, request_id, granted, time.time(), ask.caller)
            return Reservation(request_id, ask.amount, tuple(granted), tuple(exhausted),
                               {doc: amount for doc, (amount, _, _) in granted.items()},
                               tuple(over_share))

        return self._transaction(body)

    def _settle(self, request_id: str, spent: float | dict[str, float]) -> None:
        def body(db: Any) -> None:
            rows = db.execute(self._sql("SELECT doc_id, amount, caller FROM "
                                        "ctxleak_reservation WHERE request_id = ?"
                                        + self._LOCK_ROWS), (request_id,)).fetchall()
            for doc, amount, caller in rows:
                own = float(spent.get(doc, amount)) if isinstance(spent, dict) else spent
                db.execute(self._sql("UPDATE ctxleak_spend SET spent = spent - ? WHERE "
                                     "doc_id = ?"), (float(amount) - own, doc))
                if caller is not None:  # the caller's figure follows its document's
                    db.execute(self._sql("UPDATE ctxleak_caller_spend SET spent = spent - ? "
                                         "WHERE caller = ? AND doc_id = ?"),
                               (float(amount) - own, caller, doc))
            db.execute(self._sql("DELETE FROM ctxleak_reservation WHERE request_id = ?"),
                       (request_id,))
            self._settle_common(db, request_id, spent)

        self._transaction(body)

    def _ex_post(self, doc_ids: list[str], eps: float) -> None:
        def body(db: Any) -> None:
            for doc in sorted(doc_ids):  # in id order: two writers never deadlock
                db.execute(self._sql(
                    "INSERT INTO ctxleak_spend (doc_id, ex_post) VALUES (?, ?) ON CONFLICT "
                    "(doc_id) DO UPDATE SET ex_post = ctxleak_spend.ex_post + excluded.ex_post"),
                    (doc, eps))

        self._transaction(body)

    #: a document's row as read back, its common spend counted (:data:`EFFECTIVE`)
    _VIEW = (f"SELECT * FROM (SELECT s.doc_id AS doc_id, {EFFECTIVE} AS spent, s.ex_post AS "
             f"ex_post, s.doc_class AS doc_class, s.budget AS budget, s.scope AS scope FROM "
             f"ctxleak_spend s) v ")

    def _rows(self, where: str, params: tuple[Any, ...]) -> list[DocumentSpend]:
        """The documents' rows selected by ``where``, each with its open reservations."""
        with self._lock:
            self._revive()
            rows = self._db.execute(self._sql(self._VIEW + where), params).fetchall()
            held = dict(self._db.execute("SELECT doc_id, SUM(amount) FROM ctxleak_reservation "
                                         "GROUP BY doc_id").fetchall()) if rows else {}
            common = self._common_held() if rows else {}
        return [DocumentSpend(str(d), float(s), float(held.get(d, 0.0)) + common.get(g, 0.0),
                              float(e), None if c is None else str(c),
                              None if b is None else float(b)) for d, s, e, c, b, g in rows]

    def find(self, doc_id: str) -> DocumentSpend | None:
        """``doc_id``'s row, or None when the ledger has never seen it."""
        rows = self._rows("WHERE doc_id = ?", (doc_id,))
        return rows[0] if rows else None

    def document(self, doc_id: str) -> DocumentSpend:
        """What ``doc_id`` has spent (reservations included), holds in open reservations and
        has spent ex post (zeros for a document never seen: :meth:`find` tells them apart)."""
        return self.find(doc_id) or DocumentSpend(doc_id, 0.0, 0.0, 0.0)

    def documents(self, offset: int = 0, limit: int = 100) -> list[DocumentSpend]:
        """A page of the documents' rows, in id order."""
        return self._rows("ORDER BY doc_id LIMIT ? OFFSET ?", (int(limit), int(offset)))

    def count(self) -> int:
        """How many documents the ledger holds."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM ctxleak_spend").fetchone()[0])

    def lowest_remaining(self, n: int) -> list[DocumentSpend]:
        """The ``n`` documents with a budget whose remaining ε (budget − spent) is lowest."""
        return self._rows("WHERE budget IS NOT NULL ORDER BY budget - spent, doc_id LIMIT ?",
                          (int(n),))

    def classes_of(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The class the ledger holds for each of ``doc_ids`` that has one."""
        with self._lock:  # (many ids, a datastore's: one read of every classed row)
            rows = self._db.execute("SELECT doc_id, doc_class FROM ctxleak_spend WHERE "
                                    "doc_class IS NOT NULL").fetchall() if len(doc_ids) > 64 \
                else [r for d in dict.fromkeys(doc_ids) for r in self._db.execute(self._sql(
                    "SELECT doc_id, doc_class FROM ctxleak_spend WHERE doc_id = ? AND "
                    "doc_class IS NOT NULL"), (d,)).fetchall()]
        wanted = set(doc_ids)
        return {str(d): str(c) for d, c in rows if d in wanted}

    def open_reservations(self) -> list[tuple[str, str, float]]:
        """(request id, document id, amount) of every reservation not settled."""
        with self._lock:
            rows = self._db.execute("SELECT request_id, doc_id, amount FROM ctxleak_reservation "
                                    "ORDER BY created, request_id, doc_id").fetchall()
        return [(str(r), str(d), float(a)) for r, d, a in rows]

    def keep_unit(self, unit: str) -> None:
        """Record that the ledger's figures are in ``unit`` (``epsilon``, or a Rényi order and
        δ: :meth:`~ctxleak.proxy.composition.Composition.unit`), or check that they already are:
        a ledger keeps one unit for its whole life (a ledger from before units were recorded
        holds ε). Another unit is a :class:`ConfigError` naming both."""
        def body(db: Any) -> str:
            row = db.execute(self._sql("SELECT value FROM ctxleak_meta WHERE key = ?"),
                             ("unit",)).fetchone()
            if row is not None:
                return str(row[0])
            used = db.execute("SELECT COUNT(*) FROM ctxleak_spend").fetchone()[0]
            kept = "epsilon" if used else unit
            db.execute(self._sql("INSERT INTO ctxleak_meta (key, value) VALUES (?, ?)"),
                       ("unit", kept))
            return kept

        kept = self._transaction(body)
        if kept != unit:
            raise ConfigError(f"the ledger's figures are in {kept}, and this proxy would charge "
                              f"in {unit}: start it with the ledger's composition (--accounting, "
                              f"--budget-delta, --renyi-order) or give a new ledger",
                              param="accounting")

    def check(self) -> str | None:
        """None while the store answers (a lost PostgreSQL connection is opened again first);
        else what is wrong, for ``/health``."""
        try:
            with self._lock:
                self._revive()
                self._db.execute("SELECT 1").fetchone()
        except Exception as exc:  # whatever the driver raises: the ledger cannot be used
            return f"the ledger does not answer: {type(exc).__name__}"
        return None

    def _revive(self) -> None:
        """Open the store's connection again where it was lost (called under ``_lock``)."""

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SQLiteLedger(BudgetLedger):
    """The ledger in one SQLite file (WAL journal, full sync): each reservation and each
    settlement one ``BEGIN IMMEDIATE`` transaction, so two proxies or threads on the same file
    never both pass a budget."""

    unavailable = (sqlite3.OperationalError,)  # locked past its timeout, disk I/O

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
        if not self.path.exists():  # the ledger is the operator's: mode 0600 (SQLite gives
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))  # its -wal the same)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        for statement in SCHEMA:
            self._db.execute(statement)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(ctxleak_spend)")}
        for column, kind in ADDED_SPEND.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE ctxleak_spend ADD COLUMN {column} {kind}")
        for table in ("ctxleak_reservation", "ctxleak_common_reservation"):
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for column, kind in ADDED_RESERVATION.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

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

    def _rows_of(self, db: sqlite3.Connection, doc_ids: list[str]
                 ) -> Callable[[str], tuple[float, str | None]]:
        def row_of(doc: str) -> tuple[float, str | None]:
            row = db.execute(f"SELECT {EFFECTIVE}, s.doc_class FROM ctxleak_spend s WHERE "
                             f"s.doc_id = ?", (doc,)).fetchone()
            return (float(row[0]), row[1]) if row else (0.0, None)

        return row_of


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
        self._psycopg, self._url = psycopg, url
        self.unavailable = (psycopg.OperationalError, psycopg.InterfaceError)
        self._lock = threading.Lock()
        try:
            self._db = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as exc:
            raise ConfigError(f"cannot connect to the PostgreSQL ledger: {exc}",
                              param="ledger") from exc
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(7405911)")  # one schema creator
            for statement in SCHEMA:
                self._db.execute(statement)
            for column, kind in ADDED_SPEND.items():
                self._db.execute(f"ALTER TABLE ctxleak_spend ADD COLUMN IF NOT EXISTS {column} "
                                 f"{kind}")
            for table in ("ctxleak_reservation", "ctxleak_common_reservation"):
                for column, kind in ADDED_RESERVATION.items():
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS "
                                     f"{column} {kind}")

    _LOCK_ROWS = " ORDER BY doc_id FOR UPDATE"
    _LOCK_ONE = " FOR UPDATE"

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")  # psycopg's parameter style

    def _revive(self) -> None:
        """A connection the server closed (a restart) or broke is opened again; the next
        statement fails as before where the server is still down."""
        if self._db.closed or self._db.broken:  # (a server that is gone: 10 s at most)
            self._db = self._psycopg.connect(self._url, autocommit=True, connect_timeout=10)

    def _transaction(self, body: Callable[[Any], Any]) -> Any:
        """``body`` in one transaction; where the connection turns out lost (a restart since
        the last statement), once more on a new one: a transaction cut off never committed
        (one whose commit was acknowledged to nobody may be charged twice: more spent, never
        less)."""
        with self._lock:
            self._revive()
            try:
                with self._db.transaction():
                    return body(self._db)
            except self._psycopg.OperationalError:
                if not (self._db.closed or self._db.broken):
                    raise
            self._revive()
            with self._db.transaction():
                return body(self._db)

    def _rows_of(self, db: Any, doc_ids: list[str]) -> Callable[[str], tuple[float, str | None]]:
        ids = sorted(doc_ids)
        for doc in ids:
            db.execute("INSERT INTO ctxleak_spend (doc_id) VALUES (%s) ON CONFLICT DO NOTHING",
                       (doc,))
        rows = db.execute(f"SELECT s.doc_id, {EFFECTIVE}, s.doc_class FROM ctxleak_spend s "
                          f"WHERE s.doc_id = ANY(%s) ORDER BY s.doc_id FOR UPDATE OF s",
                          (ids,)).fetchall()
        seen = {str(d): (float(s), c) for d, s, c in rows}
        return lambda d: seen.get(d, (0.0, None))


def public_ledger_url(url: str) -> str:
    """``url`` as it may be printed: a password (``user:PASSWORD@host`` or ``password=…``)
    as ``***``."""
    url = re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url, count=1)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


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
