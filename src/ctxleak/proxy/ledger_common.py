"""What every private document of a datastore is charged in common, kept in one row.

A mechanism over a datastore may charge every document the same loss in each answer: DP-RAG's
private retrieval ("RAG with Differential Privacy", Grislain) reads every document's score, so
each is charged the threshold's ε, and only the few it keeps are charged more. Written per
document, each answer would write a row per document of the datastore. Instead the documents of
a datastore are *attached* to one accumulator (a scope, named by a digest of their ids): table
``ctxleak_common`` holds what every attached document has been charged in common, and a
document's row holds its own charges and the common figure at the time it was attached
(``base``), so that its spend is

    spent = own + (common − base)

which the ledger's reads (the documents API, ``/metrics``, every budget check) compute in SQL. A
reservation over the datastore then writes one common row, one common reservation row and rows
only for the documents charged more than the common amount; settling gives back what was not
spent the same way. A document whose budget the common charge would pass is *detached* (its
common spend folded into its own row, once) and left out of the answer, as any exhausted
document is; from then on it is charged as its own row. Attaching a datastore writes each of its
documents once, at the first such answer of a process."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxleak.proxy.budgets import TOLERANCE, Budgets
from ctxleak.proxy.ledger_rows import CHARGE, RECORD, Ask, Reservation, decide

#: A document row's spend with its share of the common accumulator (the row aliased ``s``).
EFFECTIVE = ("(s.spent + CASE WHEN s.scope IS NULL THEN 0 ELSE COALESCE((SELECT c.spent FROM "
             "ctxleak_common c WHERE c.scope = s.scope), 0) - s.base END)")
#: A document's common spend folded into its own row, and the row detached.
_DETACH = ("UPDATE ctxleak_spend SET spent = spent + ? - base, base = 0, scope = NULL "
           "WHERE doc_id = ? AND scope = ?")
#: A document attached (a row made, or an existing one's common spend folded in first).
_ATTACH = ("INSERT INTO ctxleak_spend (doc_id, spent, doc_class, budget, scope, base) "
           "VALUES (?, 0, ?, ?, ?, ?) ON CONFLICT (doc_id) DO UPDATE SET "
           "spent = ctxleak_spend.spent + CASE WHEN ctxleak_spend.scope IS NULL THEN 0 ELSE "
           "COALESCE((SELECT c.spent FROM ctxleak_common c WHERE c.scope = ctxleak_spend.scope), "
           "0) - ctxleak_spend.base END, scope = excluded.scope, base = excluded.base, "
           "doc_class = COALESCE(ctxleak_spend.doc_class, excluded.doc_class), "
           "budget = excluded.budget")


def scope_of(doc_ids: Sequence[str]) -> str:
    """The scope of a datastore's private documents: a digest of their ids (the same set, the
    same scope, in any order and on every replica)."""
    digest = hashlib.sha256("\n".join(sorted(doc_ids)).encode("utf-8")).hexdigest()
    return f"datastore-{digest[:16]}"


def common_part(own: Mapping[str, float], doc_ids: Sequence[str]) -> float:
    """What every one of ``doc_ids`` is charged alike in ``own`` (each document's amount): the
    least of them, 0 where one of them is charged nothing."""
    if not doc_ids or len(own) < len(doc_ids) or not own.keys() >= set(doc_ids):
        return 0.0
    return min(own[d] for d in doc_ids) if len(own) > len(doc_ids) else min(own.values())


class CommonSpend:
    """The common accumulator's operations, shared by the ledger's stores
    (:class:`~ctxleak.proxy.budget.BudgetLedger` inherits them)."""

    _db: Any
    _lock: threading.Lock
    #: what a read of the common row adds to lock it (PostgreSQL)
    _LOCK_ONE = ""

    def _sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in the driver's parameter style."""
        return statement

    def _transaction(self, body: Callable[[Any], Any]) -> Any:
        """``body(db)`` in one transaction of the store."""
        raise NotImplementedError

    def _rows_of(self, db: Any, doc_ids: list[str]) -> Callable[[str], tuple[float, str | None]]:
        """A document's spent ε (its common spend counted) and recorded class, read inside the
        reservation's transaction (the store's row locking)."""
        raise NotImplementedError

    def _common(self, db: Any, scope: str) -> float:
        """The scope's common spend (its row made where missing, and locked where the store
        locks rows)."""
        db.execute(self._sql("INSERT INTO ctxleak_common (scope, spent) VALUES (?, 0) "
                             "ON CONFLICT (scope) DO NOTHING"), (scope,))
        row = db.execute(self._sql("SELECT spent FROM ctxleak_common WHERE scope = ?"
                                   + self._LOCK_ONE), (scope,)).fetchone()
        return float(row[0])

    def common_spent(self, scope: str) -> float:
        """What every document attached to ``scope`` has been charged in common (0 for a
        scope never charged)."""
        with self._lock:
            row = self._db.execute(self._sql("SELECT spent FROM ctxleak_common WHERE scope = ?"),
                                   (scope,)).fetchone()
        return 0.0 if row is None else float(row[0])

    def attach(self, scope: str, budgets: Mapping[str, float | None],
               classes: Mapping[str, str] | None = None) -> int:
        """Attach the documents of ``budgets`` (id → budget in force, None: no limit) to
        ``scope``'s common accumulator, in one transaction: a document not yet attached gets a
        row (an existing row's spend kept: its other scope's common spend folded in), one
        already attached its budget brought up to date. Returns the rows written."""
        classes = dict(classes or {})

        def body(db: Any) -> int:
            common = self._common(db, scope)
            have = dict(db.execute(self._sql("SELECT doc_id, budget FROM ctxleak_spend WHERE "
                                             "scope = ?"), (scope,)).fetchall())
            new = [(d, classes.get(d), b, scope, common) for d, b in budgets.items()
                   if d not in have]
            changed = [(b, d) for d, b in budgets.items() if d in have and have[d] != b]
            if new:
                db.cursor().executemany(self._sql(_ATTACH), new)
            if changed:
                db.cursor().executemany(self._sql("UPDATE ctxleak_spend SET budget = ? WHERE "
                                                  "doc_id = ?"), changed)
            return len(new) + len(changed)

        return int(self._transaction(body))

    def reserve_common(self, request_id: str, scope: str, doc_ids: Sequence[str], common: float,
                       extra: Mapping[str, float], budgets: Budgets,
                       classes: Mapping[str, str] | None = None) -> Reservation:
        """Reserve ``common`` of every one of ``doc_ids`` (the answer's private documents) and
        ``extra`` more of those it names, all or nothing, in one transaction: one write for the
        documents attached to ``scope``, a row for each other document (charged ``common`` and
        its extra) and each attached one charged extra. Where a document's budget would be
        passed, nothing is charged: the attached ones among those are detached, and all are
        the reservation's ``exhausted``. The granted reservation's ``held`` names the
        documents charged as rows; its ``common`` is what every attached document holds. An
        attached document not in ``doc_ids`` (left out of the answer) is detached first."""
        def body(db: Any) -> Reservation:
            spent = self._common(db, scope)
            attached = {str(d) for (d,) in db.execute(self._sql(
                "SELECT doc_id FROM ctxleak_spend WHERE scope = ?"), (scope,)).fetchall()}
            absent = attached - set(doc_ids)  # out of this answer: detached before the charge
            if absent:
                db.cursor().executemany(self._sql(_DETACH), [(spent, d, scope) for d in absent])
                attached -= absent
            over = [str(d) for (d,) in db.execute(self._sql(
                "SELECT doc_id FROM ctxleak_spend WHERE scope = ? AND budget IS NOT NULL AND "
                "spent - base + ? > budget + ?"), (scope, spent + common, TOLERANCE)).fetchall()]
            alone = set(doc_ids) - attached  # (set arithmetic: no loop over the datastore)
            own = {d: extra.get(d, 0.0) + (0.0 if d in attached else common)
                   for d in alone.union(extra)}
            own = {d: a for d, a in own.items() if a > 0 and d not in over}
            row_of = self._rows_of(db, list(own))

            def with_common(doc: str) -> tuple[float, str | None]:
                value, cls = row_of(doc)
                return value + (common if doc in attached else 0.0), cls

            ask = Ask(list(own), max(own.values(), default=0.0), budgets, True,
                      dict(classes or {}), False, own)
            granted, exhausted = decide(ask, with_common)
            out = [*over, *exhausted]
            if out:
                db.cursor().executemany(self._sql(_DETACH), [(spent, d, scope) for d in out
                                                             if d in attached])
                return Reservation(request_id, common, (), tuple(out))
            now = time.time()
            db.execute(self._sql("UPDATE ctxleak_common SET spent = spent + ? WHERE scope = ?"),
                       (common, scope))
            db.execute(self._sql("INSERT INTO ctxleak_common_reservation (request_id, scope, "
                                 "amount, created) VALUES (?, ?, ?, ?)"),
                       (request_id, scope, common, now))
            for doc, (amount, cls, budget) in granted.items():
                db.execute(self._sql(CHARGE), (doc, amount, cls, budget))
                db.execute(self._sql(RECORD), (request_id, doc, amount, now, None))
            return Reservation(request_id, common, tuple(dict.fromkeys(doc_ids)), (),
                               {d: a for d, (a, _, _) in granted.items()}, common=common)

        return self._transaction(body)

    def _settle_common(self, db: Any, request_id: str, spent: float | dict[str, float]) -> None:
        """A settlement's common part (inside its transaction): a common reservation spends
        what it holds (a mapping, which names documents only) or at most ``spent``."""
        rows = db.execute(self._sql("SELECT scope, amount FROM ctxleak_common_reservation WHERE "
                                    "request_id = ?"), (request_id,)).fetchall()
        for scope, amount in rows:
            used = float(amount) if isinstance(spent, dict) else min(float(spent), float(amount))
            db.execute(self._sql("UPDATE ctxleak_common SET spent = spent - ? WHERE scope = ?"),
                       (float(amount) - used, scope))
        if rows:
            db.execute(self._sql("DELETE FROM ctxleak_common_reservation WHERE request_id = ?"),
                       (request_id,))

    def _common_held(self) -> dict[str, float]:
        """What the open common reservations hold, per scope (called under ``_lock``)."""
        return {str(s): float(a) for s, a in self._db.execute(
            "SELECT scope, SUM(amount) FROM ctxleak_common_reservation GROUP BY scope")}


__all__ = ["EFFECTIVE", "CommonSpend", "common_part", "scope_of"]
