"""``mapped_errors``: which Cosmos SDK failures may have carried a write out (``StoreOutcomeUnknown``) and
which say it was not (plain ``StoreUnavailable``). Cosmos DB answers 503 only for a request it did not
process; 429 and 449 refuse it, 410 says its partition moved; a request that was never sent did nothing."""

from __future__ import annotations

import pytest
from azure.core.exceptions import IncompleteReadError, ServiceRequestError, ServiceResponseError
from azure.cosmos import exceptions as cx

from adapters.cosmos.errors import AlreadyExists, EtagMismatch, StoreOutcomeUnknown, StoreUnavailable, mapped_errors


def mapped(error: BaseException) -> BaseException:
    with pytest.raises(BaseException) as caught, mapped_errors():
        raise error
    return caught.value


@pytest.mark.parametrize("status", [408, 500])
def test_a_timeout_or_server_error_leaves_the_outcome_unknown(status: int) -> None:
    assert isinstance(mapped(cx.CosmosHttpResponseError(status_code=status, message="x")), StoreOutcomeUnknown)


@pytest.mark.parametrize("status", [410, 429, 449, 503])
def test_throttling_and_unavailability_say_nothing_was_written(status: int) -> None:
    error = mapped(cx.CosmosHttpResponseError(status_code=status, message="x"))
    assert isinstance(error, StoreUnavailable) and not isinstance(error, StoreOutcomeUnknown)


def test_a_request_sent_without_an_answer_or_past_the_client_timeout_leaves_the_outcome_unknown() -> None:
    assert isinstance(mapped(ServiceResponseError("connection reset")), StoreOutcomeUnknown)
    assert isinstance(mapped(cx.CosmosClientTimeoutError()), StoreOutcomeUnknown)
    assert isinstance(mapped(IncompleteReadError("Connection broken: IncompleteRead")), StoreOutcomeUnknown)


def test_a_request_never_sent_wrote_nothing() -> None:
    error = mapped(ServiceRequestError("connection refused"))
    assert isinstance(error, StoreUnavailable) and not isinstance(error, StoreOutcomeUnknown)


def test_conflicts_and_other_errors_keep_their_meaning() -> None:
    assert isinstance(mapped(cx.CosmosAccessConditionFailedError(status_code=412, message="x")), EtagMismatch)
    assert isinstance(mapped(cx.CosmosResourceExistsError(status_code=409, message="x")), AlreadyExists)
    bad_request = cx.CosmosHttpResponseError(status_code=400, message="x")
    assert mapped(bad_request) is bad_request


def test_an_item_too_large_is_its_own_store_error_not_a_transient_one() -> None:
    from adapters.cosmos.errors import ItemTooLarge

    error = mapped(cx.CosmosHttpResponseError(status_code=413, message="Request size is too large"))
    assert isinstance(error, ItemTooLarge) and not isinstance(error, StoreUnavailable)
