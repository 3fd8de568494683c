"""A state store whose writes can fail before or after they commit (a lost response), for the tests
of unknown-outcome writes."""

from __future__ import annotations

from typing import Any

from adapters.cosmos.errors import StoreUnavailable
from domain.records import StateRecord


class FlakyStates:
    """Delegates to a real store. ``lose[order]``: the next N replaces of that order commit, then
    raise ``StoreUnavailable`` (response lost). ``refuse[order]``: the next N replaces raise before
    committing. ``fail_reads``: the next N reads raise."""

    # what a lost response raises (``StoreOutcomeUnknown``: as ``adapters.cosmos.errors.mapped_errors`` maps a timeout)
    lost_error: type[StoreUnavailable] = StoreUnavailable

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.lose: dict[str, int] = {}
        self.refuse: dict[str, int] = {}
        self.fail_reads = 0

    def _take(self, table: dict[str, int], order_id: str) -> bool:
        if table.get(order_id, 0) > 0:
            table[order_id] -= 1
            return True
        return False

    def replace(self, record: StateRecord) -> StateRecord:
        if self._take(self.refuse, record.order_id):
            raise StoreUnavailable(f"503 on replace of {record.order_id}")
        written: StateRecord = self._inner.replace(record)
        if self._take(self.lose, record.order_id):
            raise self.lost_error(f"no response to the replace of {record.order_id} (it committed)")
        return written

    def get(self, order_id: str) -> StateRecord | None:
        if self.fail_reads > 0:
            self.fail_reads -= 1
            raise StoreUnavailable(f"503 on read of {order_id}")
        found: StateRecord | None = self._inner.get(order_id)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
