"""The operator's read model over the ``state`` container: paged lists and the records a summary
needs. Counts per state use the state store's own ``count``.

Queries are cross-partition and bounded: a page is at most ``MAX_PAGE_SIZE`` records, and the
Processing records a summary looks at are capped (Processing is itself capped by ``MAX_IN_FLIGHT``).
Deferral documents (``deferred:<orderId>``) share the container and have no ``processState``: every
query filters on it. A document that does not map to a record is skipped and named in the page
(``RecordPage.unmapped``), never the failure of the others."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from adapters.cosmos.errors import mapped_errors
from adapters.cosmos.state_store import Unmapped, map_each, query_page
from domain.records import StateRecord
from domain.states import ProcessState

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 25


@dataclass(frozen=True)
class RecordPage:
    records: list[StateRecord]
    continuation: str | None
    # documents the query returned that do not map to a record (schema drift, a hand edit): skipped,
    # so that one of them never takes the operator's view down; the answer names them
    unmapped: list[Unmapped] = field(default_factory=list)


class OpsQueries(Protocol):
    def page(self, state: ProcessState | None, page_size: int, continuation: str | None) -> RecordPage:
        """Records, newest ``updatedAt`` first, optionally of one state."""
        ...

    def processing(self, limit: int) -> RecordPage:
        """Processing records, oldest ``completeBy`` first (one page: no continuation)."""
        ...


class CosmosOpsQueries:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container

    def page(self, state: ProcessState | None, page_size: int, continuation: str | None) -> RecordPage:
        where = "IS_DEFINED(c.processState) AND IS_STRING(c.updatedAt)"  # sort keys are text only (``state_store``)
        params: list[dict[str, Any]] = []
        if state is not None:
            where = "c.processState = @state AND IS_STRING(c.updatedAt)"
            params.append({"name": "@state", "value": state.value})
        query = f"SELECT * FROM c WHERE {where} ORDER BY c.updatedAt DESC"
        size = max(1, min(page_size, MAX_PAGE_SIZE))
        with mapped_errors():
            docs, token = query_page(self._c, query, params, size, continuation)
        records, unmapped = map_each(docs, "ops list", log_skipped=False)
        return RecordPage(records, token, unmapped)

    def processing(self, limit: int) -> RecordPage:
        query = (  # sort keys are text only (``state_store``)
            "SELECT TOP @limit * FROM c WHERE c.processState = @state AND IS_STRING(c.completeBy) ORDER BY c.completeBy"
        )
        params: list[dict[str, Any]] = [
            {"name": "@limit", "value": limit},
            {"name": "@state", "value": ProcessState.PROCESSING.value},
        ]
        with mapped_errors():
            docs = list(self._c.query_items(query, parameters=params, enable_cross_partition_query=True))
        records, unmapped = map_each(docs, "ops summary", log_skipped=False)
        return RecordPage(records, None, unmapped)
