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
documents once, at the first such answer of a process.

A caller with a share of each budget (``--caller-share`` below 1) is kept the same way: table
``ctxleak_caller_common`` holds what the caller has been charged in common on every document of
a scope, so that its figure of an attached document is its own row's plus that (a document
attached after the caller's first common charge starts its row at minus the caller's common
figure, and a detached one has the caller's common figure folded into its row). An answer then
writes one caller row, not one per document."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxleak.proxy.budgets import TOLERANCE, Budgets
from ctxleak.proxy.ledger_rows import CALLER_CHARGE, CHARGE, RECORD, Ask, Reservation, decide

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

#: Each caller's common figure of a scope folded into its row of a detached document.
_FOLD_CALLERS = ("INSERT INTO ctxleak_caller_spend (caller, doc_id, spent) SELECT caller, ?, "
                 "spent FROM ctxleak_caller_common WHERE scope = ? AND spent <> 0 "
                 "ON CONFLICT (caller, doc_id) DO UPDATE SET "
                 "spent = ctxleak_caller_spend.spent + excluded.spent")
#: A newly attached document's caller rows started at minus each caller's common figure.
_OFFSET_CALLERS = _FOLD_CALLERS.replace("SELECT caller, ?, spent", "SELECT caller, ?, -spent")
#: Each caller's common figure of the scope a document leaves for another, folded into its row.
_FOLD_OLD = ("INSERT INTO ctxleak_caller_spend (caller, doc_id, spent) SELECT c.caller, s.doc_id, "
             "c.spent FROM ctxleak_spend s JOIN ctxleak_caller_common c ON c.scope = s.scope "
             "WHERE s.doc_id = ? AND s.scope <> ? AND c.spent <> 0 "
             "ON CONFLICT (caller, doc_id) DO UPDATE SET "
             "spent = ctxleak_caller_spend.spent + excluded.spent")
#: The attached documents a caller's share no longer covers (its own row plus its common figure
#: plus this answer's common charge over share × budget).
_OVER_SHARE = ("SELECT s.doc_id FROM ctxleak_spend s LEFT JOIN ctxleak_caller_spend k ON "
               "k.caller = ? AND k.doc_id = s.doc_id WHERE s.scope = ? AND s.budget IS NOT NULL "
               "AND COALESCE(k.spent, 0) + ? > ? * s.budget + ?")


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

    def _caller_rows_of(self, db: Any, caller: str, doc_ids: list[str]
                        ) -> Callable[[str], float]:
        """What ``caller`` holds and spent of a document (its common figure counted)."""
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

    def _caller_common(self, db: Any, caller: str, scope: str) -> float:
        """The caller's common figure of the scope (its row made where missing)."""
        db.execute(self._sql("INSERT INTO ctxleak_caller_common (caller, scope, spent) VALUES "
                             "(?, ?, 0) ON CONFLICT (caller, scope) DO NOTHING"), (caller, scope))
        row = db.execute(self._sql("SELECT spent FROM ctxleak_caller_common WHERE caller = ? "
                                   "AND scope = ?"), (caller, scope)).fetchone()
        return float(row[0])

    def _detach(self, db: Any, spent: float, scope: str, doc_ids: Sequence[str]) -> None:
        """Detach ``doc_ids`` from ``scope``: their common spend, and each caller's common
        figure, folded into their own rows."""
        if doc_ids:
            db.cursor().executemany(self._sql(_FOLD_CALLERS), [(d, scope) for d in doc_ids])
            db.cursor().executemany(self._sql(_DETACH), [(spent, d, scope) for d in doc_ids])

    def caller_common_of(self, caller: str) -> dict[str, float]:
        """What ``caller`` has been charged in common of each attached document (documents of
        scopes it was charged in only)."""
        with self._lock:
            rows = self._db.execute(self._sql(
                "SELECT s.doc_id, c.spent FROM ctxleak_caller_common c JOIN ctxleak_spend s ON "
                "s.scope = c.scope WHERE c.caller = ? AND c.spent <> 0"), (caller,)).fetchall()
        return {str(d): float(v) for d, v in rows}

    def caller_spent(self, caller: str) -> dict[str, float]:
        """What ``caller`` holds and spent of each document it reserved (open reservations
        counted as spent), in the unit of the documents' ``spent``."""
        with self._lock:
            rows = self._db.execute(self._sql("SELECT doc_id, spent FROM ctxleak_caller_spend "
                                              "WHERE caller = ? ORDER BY doc_id"),
                                    (caller,)).fetchall()
        out = {str(d): float(s) for d, s in rows}
        for doc, common in self.caller_common_of(caller).items():
            out[doc] = out.get(doc, 0.0) + common
        return dict(sorted(out.items()))

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
                db.cursor().executemany(self._sql(_FOLD_OLD), [(d, scope) for d, *_ in new])
                db.cursor().executemany(self._sql(_OFFSET_CALLERS),
                                        [(d, scope) for d, *_ in new])
                db.cursor().executemany(self._sql(_ATTACH), new)
            if changed:
                db.cursor().executemany(self._sql("UPDATE ctxleak_spend SET budget = ? WHERE "
                                                  "doc_id = ?"), changed)
            return len(new) + len(changed)

        return int(self._transaction(body))

    def reserve_common(self, request_id: str, scope: str, doc_ids: Sequence[str], common: float,
                       extra: Mapping[str, float], budgets: Budgets,
                       classes: Mapping[str, str] | None = None, caller: str | None = None,
                       share: float | None = None) -> Reservation:
        """Reserve ``common`` of every one of ``doc_ids`` (the answer's private documents) and
        ``extra`` more of those it names, all or nothing, in one transaction: one write for the
        documents attached to ``scope``, a row for each other document (charged ``common`` and
        its extra) and each attached one charged extra. Where a document's budget would be
        passed, nothing is charged: the attached ones among those are detached, and all are
        the reservation's ``exhausted``. The granted reservation's ``held`` names the
        documents charged as rows; its ``common`` is what every attached document holds. An
        attached document not in ``doc_ids`` (left out of the answer) is detached first.
        ``caller`` and ``share``: whose reservation it is, and the fraction of each budget it
        may hold: its common figure is charged once, in one row; a document whose share the
        charge would pass is in ``over_share`` (detached, for this caller's next answer to
        leave it out; where every document is, nothing is detached: the caller is refused)."""
        def body(db: Any) -> Reservation:
            spent = self._common(db, scope)
            mine = 0.0 if caller is None else self._caller_common(db, caller, scope)
            attached = {str(d) for (d,) in db.execute(self._sql(
                "SELECT doc_id FROM ctxleak_spend WHERE scope = ?"), (scope,)).fetchall()}
            absent = attached - set(doc_ids)  # out of this answer: detached before the charge
            self._detach(db, spent, scope, sorted(absent))
            attached -= absent
            over = [str(d) for (d,) in db.execute(self._sql(
                "SELECT doc_id FROM ctxleak_spend WHERE scope = ? AND budget IS NOT NULL AND "
                "spent - base + ? > budget + ?"), (scope, spent + common, TOLERANCE)).fetchall()]
            over_share = [] if caller is None or share is None else [
                str(d) for (d,) in db.execute(self._sql(_OVER_SHARE), (
                    caller, scope, mine + common, share, TOLERANCE)).fetchall()
                if d not in over]
            alone = set(doc_ids) - attached  # (set arithmetic: no loop over the datastore)
            own = {d: extra.get(d, 0.0) + (0.0 if d in attached else common)
                   for d in alone.union(extra)}
            own = {d: a for d, a in own.items() if a > 0 and d not in over
                   and d not in over_share}
            row_of = self._rows_of(db, list(own))
            caller_of = None if caller is None else self._caller_rows_of(db, caller, list(own))

            def with_common(doc: str) -> tuple[float, str | None]:
                value, cls = row_of(doc)
                return value + (common if doc in attached else 0.0), cls

            def caller_with_common(doc: str) -> float:
                assert caller_of is not None
                return caller_of(doc) + (common if doc in attached else 0.0)

            ask = Ask(list(own), max(own.values(), default=0.0), budgets, True,
                      dict(classes or {}), False, own, caller, share)
            more_over_share: list[str] = []
            granted, exhausted = decide(ask, with_common,
                                        None if caller_of is None else caller_with_common,
                                        more_over_share)
            over_share += more_over_share
            out = [*over, *exhausted]
            if out or over_share:
                # a caller left with no document is refused: its shares spent everywhere
                # detach nothing (other callers' answers keep the common row)
                shared = [] if set(doc_ids) <= {*out, *over_share} else over_share
                self._detach(db, spent, scope, [d for d in [*out, *shared] if d in attached])
                return Reservation(request_id, common, (), tuple(out),
                                   over_share=tuple(over_share))
            now = time.time()
            db.execute(self._sql("UPDATE ctxleak_common SET spent = spent + ? WHERE scope = ?"),
                       (common, scope))
            db.execute(self._sql("INSERT INTO ctxleak_common_reservation (request_id, scope, "
                                 "amount, created, caller) VALUES (?, ?, ?, ?, ?)"),
                       (request_id, scope, common, now, caller))
            if caller is not None:
                db.execute(self._sql("UPDATE ctxleak_caller_common SET spent = spent + ? WHERE "
                                     "caller = ? AND scope = ?"), (common, caller, scope))
            self._charge_rows(db, request_id, granted, now, caller)
            return Reservation(request_id, common, tuple(dict.fromkeys(doc_ids)), (),
                               {d: a for d, (a, _, _) in granted.items()}, common=common)

        return self._transaction(body)

    def _charge_rows(self, db: Any, request_id: str,
                     granted: Mapping[str, tuple[float, str | None, float | None]], now: float,
                     caller: str | None) -> None:
        """Write a granted reservation's document rows (inside its transaction): each
        document charged its amount (its class and budget recorded), the reservation row, and
        the caller's figure of it."""
        for doc, (amount, cls, budget) in granted.items():
            db.execute(self._sql(CHARGE), (doc, amount, cls, budget))
            db.execute(self._sql(RECORD), (request_id, doc, amount, now, caller))
            if caller is not None:
                db.execute(self._sql(CALLER_CHARGE), (caller, doc, amount))

    def _settle_common(self, db: Any, request_id: str, spent: float | dict[str, float]) -> None:
        """A settlement's common part (inside its transaction): a common reservation spends
        what it holds (a mapping, which names documents only) or at most ``spent``."""
        rows = db.execute(self._sql("SELECT scope, amount, caller FROM "
                                    "ctxleak_common_reservation WHERE request_id = ?"),
                          (request_id,)).fetchall()
        for scope, amount, caller in rows:
            used = float(amount) if isinstance(spent, dict) else min(float(spent), float(amount))
            db.execute(self._sql("UPDATE ctxleak_common SET spent = spent - ? WHERE scope = ?"),
                       (float(amount) - used, scope))
            if caller is not None:  # the caller's common figure follows the documents'
                db.execute(self._sql("UPDATE ctxleak_caller_common SET spent = spent - ? WHERE "
                                     "caller = ? AND scope = ?"),
                           (float(amount) - used, caller, scope))
        if rows:
            db.execute(self._sql("DELETE FROM ctxleak_common_reservation WHERE request_id = ?"),
                       (request_id,))

    def _common_held(self) -> dict[str, float]:
        """What the open common reservations hold, per scope (called under ``_lock``)."""
        return {str(s): float(a) for s, a in self._db.execute(
            "SELECT scope, SUM(amount) FROM ctxleak_common_reservation GROUP BY scope")}


__all__ = ["EFFECTIVE", "CommonSpend", "common_part", "scope_of"]
