"""An ``InvalidMessage`` keeps its reason wherever it is raised: through a ``with`` block of a generator-based
context manager (a tracing span, a lock helper), which sets the exception's ``__traceback__`` as it passes. A
frozen dataclass refused the assignment and the caller got ``FrozenInstanceError`` instead: an unknown error,
retried to the delivery limit, where the reason should have dead-lettered the message at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from contracts.messages import ORDERS_QUEUE_TYPES
from contracts.parsing import InvalidMessage, parse


@contextmanager
def span() -> Iterator[None]:
    yield


def test_a_refusal_raised_inside_a_with_block_reaches_the_caller_with_its_reason() -> None:
    with pytest.raises(InvalidMessage) as refused, span():
        parse(b"{not json", ORDERS_QUEUE_TYPES)
    assert refused.value.reason and refused.value.description
    assert str(refused.value).startswith(f"{refused.value.reason}: ")


def test_a_refusal_is_hashable_as_exceptions_are() -> None:
    """Code that keeps exceptions in a set or as a key (``traceback``, logging handlers) still can."""
    refusal = InvalidMessage("BodyNotJson", "body is not JSON")
    assert {refusal: 1}[refusal] == 1
