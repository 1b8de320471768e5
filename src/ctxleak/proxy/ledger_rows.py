"""What the privacy proxy's ledger stores share (:mod:`ctxleak.proxy.budget`): its rows as read
back (:class:`Reservation`, :class:`DocumentSpend`), the one pure decision of which documents a
reservation is granted (:func:`decide`, the same for SQLite and PostgreSQL) and the schema."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ctxleak.proxy.budgets import TOLERANCE, Budgets, share_hold


@dataclass(frozen=True)
class Reservation:
    """What :meth:`BudgetLedger.reserve` granted: the request, the amount asked of each
    document, the documents granted and those whose budget could not cover it, and what each
    granted document holds (the amount, or with ``hold_rest`` its remaining budget);
    ``over_share``: the documents refused because the caller's share of them is spent (not in
    ``exhausted``: others may still use them)."""

    request_id: str
    amount: float
    granted: tuple[str, ...]
    exhausted: tuple[str, ...]
    held: Mapping[str, float] = field(default_factory=dict)
    over_share: tuple[str, ...] = ()
    #: what every document attached to the datastore's common accumulator holds
    #: (:mod:`~ctxleak.proxy.ledger_common`), beside ``held``
    common: float = 0.0


@dataclass(frozen=True)
class DocumentSpend:
    """One document's row: guaranteed ε charged (settled answers plus open reservations), how
    much of it is still reserved, the ex-post ε of plain CID answers (not a guarantee), its class
    (the first one a request gave) and the budget in force at its last reservation (None: no
    limit)."""

    doc_id: str
    spent: float
    reserved: float
    ex_post: float
    doc_class: str | None = None
    budget: float | None = None

    @property
    def remaining(self) -> float | None:
        """ε left: the budget minus what is spent (None: no limit)."""
        return None if self.budget is None else self.budget - self.spent


@dataclass(frozen=True)
class Ask:
    """One reservation's question (:meth:`BudgetLedger.reserve`'s arguments)."""

    doc_ids: list[str]
    amount: float
    budgets: Budgets
    all_or_nothing: bool
    classes: dict[str, str]
    hold_rest: bool
    amounts: dict[str, float] = field(default_factory=dict)  # each document's own amount
    caller: str | None = None
    share: float | None = None


def decide(ask: Ask, row_of: Callable[[str], tuple[float, str | None]],
            caller_of: Callable[[str], float] | None = None, over_share: list[str] | None = None
            ) -> tuple[dict[str, tuple[float, str | None, float | None]], list[str]]:
    """Which documents the reservation is granted for: {id: (amount held, class, budget)},
    and the exhausted ids. ``row_of``: a document's spent ε and recorded class;
    ``caller_of``: what the caller holds of it, whose share (:func:`share_hold`) may refuse
    a document that fits its budget (its id added to ``over_share``)."""
    granted: dict[str, tuple[float, str | None, float | None]] = {}
    exhausted: list[str] = []
    for doc in ask.doc_ids:
        spent, recorded = row_of(doc)
        cls = recorded if recorded is not None else ask.classes.get(doc)
        budget = ask.budgets.of(doc, cls)
        amount = ask.amounts.get(doc, ask.amount)
        if ask.hold_rest:  # an unbounded spend: all that is left, which must be something
            amount = 0.0 if budget is None else max(budget - spent, 0.0)
            fits = budget is None or spent < budget
        elif budget is None:
            fits = True
        elif amount > 0:
            fits = spent + amount <= budget + TOLERANCE
        else:  # an answer that reserves nothing (ex-post charging) needs some budget left
            fits = spent < budget
        if fits and caller_of is not None and ask.share is not None:
            held = share_hold(amount, budget, ask.share, caller_of(doc), ask.hold_rest)
            if held is None:
                (over_share if over_share is not None else exhausted).append(doc)
                continue
            amount = held
        if fits:
            granted[doc] = (amount, cls, budget)
        else:
            exhausted.append(doc)
    if ask.all_or_nothing and (exhausted or over_share):
        granted = {}
    return granted, exhausted


SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ctxleak_spend (doc_id TEXT PRIMARY KEY, "
    "spent DOUBLE PRECISION NOT NULL DEFAULT 0, ex_post DOUBLE PRECISION NOT NULL DEFAULT 0, "
    "doc_class TEXT, budget DOUBLE PRECISION)",
    "CREATE TABLE IF NOT EXISTS ctxleak_reservation (request_id TEXT NOT NULL, "
    "doc_id TEXT NOT NULL, amount DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (request_id, doc_id))",
    "CREATE TABLE IF NOT EXISTS ctxleak_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ctxleak_caller_spend (caller TEXT NOT NULL, doc_id TEXT NOT "
    "NULL, spent DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (caller, doc_id))",
    # what every document attached to a datastore has spent in common, and its reservations
    # (:mod:`~ctxleak.proxy.ledger_common`)
    "CREATE TABLE IF NOT EXISTS ctxleak_common (scope TEXT PRIMARY KEY, "
    "spent DOUBLE PRECISION NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS ctxleak_common_reservation (request_id TEXT NOT NULL, "
    "scope TEXT NOT NULL, amount DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (request_id, scope))",
    # what a caller has been charged in common on every document attached to a scope
    "CREATE TABLE IF NOT EXISTS ctxleak_caller_common (caller TEXT NOT NULL, scope TEXT NOT "
    "NULL, spent DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (caller, scope))",
)
#: Columns a ledger made before documents had classes lacks: added when it is opened.
ADDED_SPEND = {"doc_class": "TEXT", "budget": "DOUBLE PRECISION", "scope": "TEXT",
               "base": "DOUBLE PRECISION NOT NULL DEFAULT 0"}
#: A reservation's writes: the document's charge (its class kept once given, the budget in
#: force), then the reservation's row.
CHARGE = ("INSERT INTO ctxleak_spend (doc_id, spent, doc_class, budget) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (doc_id) DO UPDATE SET spent = ctxleak_spend.spent + excluded.spent, "
           "doc_class = COALESCE(ctxleak_spend.doc_class, excluded.doc_class), "
           "budget = excluded.budget")
RECORD = ("INSERT INTO ctxleak_reservation (request_id, doc_id, amount, created, caller) "
           "VALUES (?, ?, ?, ?, ?)")
#: What a caller's reservation adds to its figure of the document.
CALLER_CHARGE = ("INSERT INTO ctxleak_caller_spend (caller, doc_id, spent) VALUES (?, ?, ?) "
                  "ON CONFLICT (caller, doc_id) DO UPDATE SET "
                  "spent = ctxleak_caller_spend.spent + excluded.spent")
#: A reservation's caller, a column a ledger made before callers lacks: added when opened.
ADDED_RESERVATION = {"caller": "TEXT"}


__all__ = ["ADDED_RESERVATION", "ADDED_SPEND", "CALLER_CHARGE", "CHARGE", "RECORD", "SCHEMA", "Ask",
           "DocumentSpend", "Reservation", "decide"]
