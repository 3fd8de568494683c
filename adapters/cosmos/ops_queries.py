"""The operator's read model over the ``state`` container: paged lists and the records a summary
needs. Counts per state use the state store's own ``count``.

Queries are cross-partition and bounded: a page is at most ``MAX_PAGE_SIZE`` records, paged by keyset
(``state_store.seek_page``: the next page is a fresh query after the last (updatedAt, id) of the one
before, never a Cosmos DB continuation token), and the
Processing and Compensating records a summary looks at are capped (Processing is itself capped by ``MAX_IN_FLIGHT``).
Deferral documents (``deferred:<orderId>``) share the container and have no ``processState``: every
query filters on it. A document that does not map to a record is skipped and named in the page
(``RecordPage.unmapped``), never the failure of the others."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from adapters.cosmos.errors import mapped_errors, query_all
from adapters.cosmos.state_store import SeekKey, Unmapped, map_each, seek_page
from domain.records import StateRecord
from domain.states import ProcessState

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 25
# The list's orders (``state_store.seek_page``), newest first: of one state (sorted on it first, to use the
# composite index (processState, updatedAt, id)), of every state (composite index (updatedAt, id)).
LIST_ORDER_OF_STATE = "ORDER BY c.processState DESC, c.updatedAt DESC, c.id DESC"
LIST_ORDER_ANY = "ORDER BY c.updatedAt DESC, c.id DESC"


@dataclass(frozen=True)
class RecordPage:
    records: list[StateRecord]
    after: SeekKey | None  # where the page ended when more may follow (the next page's ``after``)
    # documents the query returned that do not map to a record (schema drift, a hand edit): skipped,
    # so that one of them never takes the operator's view down; the answer names them
    unmapped: list[Unmapped] = field(default_factory=list)


class OpsQueries(Protocol):
    def page(self, state: ProcessState | None, page_size: int, after: SeekKey | None) -> RecordPage:
        """Records, newest ``updatedAt`` first (then the greatest id), optionally of one state, after ``after``."""
        ...

    def oldest_deadlines(self, state: ProcessState, limit: int) -> RecordPage:
        """Records of ``state`` with a ``completeBy``, oldest first (one page: no continuation): the Processing
        attempts and the Compensating rounds a summary looks at."""
        ...


class CosmosOpsQueries:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container

    def page(self, state: ProcessState | None, page_size: int, after: SeekKey | None) -> RecordPage:
        # sort keys are text only (``state_store``): a cross-partition ORDER BY over mixed types fails on Azure
        where, order = "IS_DEFINED(c.processState) AND IS_STRING(c.updatedAt)", LIST_ORDER_ANY
        params: list[dict[str, Any]] = []
        if state is not None:
            where, order = "c.processState = @state AND IS_STRING(c.updatedAt)", LIST_ORDER_OF_STATE
            params.append({"name": "@state", "value": state.value})
        size = max(1, min(page_size, MAX_PAGE_SIZE))
        with mapped_errors():
            docs, last = seek_page(self._c, where, params, order, size, after)
        records, unmapped = map_each(docs, "ops list", log_skipped=False)
        return RecordPage(records, last, unmapped)

    def oldest_deadlines(self, state: ProcessState, limit: int) -> RecordPage:
        query = (  # sort keys are text only (``state_store``)
            "SELECT TOP @limit * FROM c WHERE c.processState = @state AND IS_STRING(c.completeBy) ORDER BY c.completeBy"
        )
        params: list[dict[str, Any]] = [
            {"name": "@limit", "value": limit},
            {"name": "@state", "value": state.value},
        ]
        docs = query_all(self._c, query, parameters=params, enable_cross_partition_query=True)
        records, unmapped = map_each(docs, "ops summary", log_skipped=False)
        return RecordPage(records, None, unmapped)
