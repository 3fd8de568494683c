"""The order database: immutable orders in the ``orders`` container, written create-or-verify."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from adapters.cosmos.errors import AlreadyExists, mapped_errors, read_or_none

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

_SYSTEM_FIELDS = ("_rid", "_self", "_etag", "_attachments", "_ts")


class CreateOutcome(StrEnum):
    CREATED = "created"
    IDENTICAL = "identical"  # an exact duplicate: nothing written
    CONFLICT = "conflict"  # same id, different immutable data: never overwritten


class OrderStore(Protocol):
    def get(self, order_id: str) -> dict[str, Any] | None: ...

    def create_or_verify(self, order: dict[str, Any]) -> CreateOutcome: ...


def strip_system_fields(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in _SYSTEM_FIELDS}


def _given(doc: dict[str, Any]) -> dict[str, Any]:
    """What an order document says: an optional field left null is no field. A newer version's document
    has its new optional fields, null when the submitter left them out; the version before (after a
    rollback), or after (an upgrade), handling the same message again writes none of them."""
    return {k: v for k, v in strip_system_fields(doc).items() if v is not None}


def same_order(stored: dict[str, Any], order: dict[str, Any]) -> bool:
    """Whether ``stored`` (as read) is the order document ``order``: what ``create_or_verify`` calls identical."""
    return _given(stored) == _given(order)


class CosmosOrderStore:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container

    def get(self, order_id: str) -> dict[str, Any] | None:
        doc = read_or_none(self._c, order_id, order_id)
        return None if doc is None else strip_system_fields(doc)

    def create_or_verify(self, order: dict[str, Any]) -> CreateOutcome:
        try:
            with mapped_errors():
                self._c.create_item(order)
            return CreateOutcome.CREATED
        except AlreadyExists:
            existing = self.get(order["id"])
            if existing is not None and same_order(existing, order):
                return CreateOutcome.IDENTICAL
            return CreateOutcome.CONFLICT
