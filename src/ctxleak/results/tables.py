"""One type for every table of one row per document: the influence run's leak ledger
(:meth:`InfluenceResult.documents`), the attacks' ledgers (:meth:`ExtractResult.ledger`,
:meth:`MembershipResult.ledger`) and the findings sheet's rows.

A :class:`DocumentTable` is a read-only sequence of plain dicts (``for row in table``,
``table[0]``, ``len(table)``: what the list of dicts it replaces gave), with ``.records`` (that
list), ``.columns`` (their order), ``.units`` (a column's unit) and ``.to_pandas()`` (one row per
document, the units in ``frame.attrs["units"]``); ``table["document"]`` is a column, as pandas
gives it, for code written against the data frame that one of them returned before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from ctxleak.results.base import import_pandas


@dataclass(frozen=True)
class DocumentTable(Sequence[dict[str, Any]]):
    """Rows (one dict per document, in rank order), their ``columns`` (None: the keys in
    first-seen order) and ``units`` by column."""

    records: Sequence[dict[str, Any]]
    columns: Sequence[str] | None = None
    units: Mapping[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    @overload
    def __getitem__(self, key: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, key: slice) -> list[dict[str, Any]]: ...

    @overload
    def __getitem__(self, key: str) -> Any: ...

    def __getitem__(self, key: int | slice | str) -> Any:
        """A row (an int), rows (a slice), or a column by name as a pandas Series."""
        if isinstance(key, str):
            frame = self.to_pandas()
            if key not in frame.columns:
                raise KeyError(f"no column {key!r}; columns: {', '.join(map(str, frame.columns))}")
            return frame[key]
        if isinstance(key, slice):
            return list(self.records[key])
        return self.records[key]

    def column_names(self) -> list[str]:
        """The columns: those given, else every row's keys in first-seen order."""
        if self.columns is not None:
            return list(self.columns)
        seen: dict[str, None] = {}
        for row in self.records:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def to_pandas(self) -> Any:
        """One row per document (nested fields stay Python objects in their cells); the units
        of the columns that have one in ``frame.attrs["units"]``."""
        frame = import_pandas("to_pandas() needs").DataFrame.from_records(
            list(self.records), columns=self.column_names())
        frame.attrs["units"] = dict(self.units)
        return frame

    def __repr__(self) -> str:
        return f"DocumentTable({len(self.records)} documents)"


__all__ = ["DocumentTable"]
