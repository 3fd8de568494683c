"""Store errors the rest of the app understands, independent of the Cosmos SDK, and ``mapped_errors``:
the one place the SDK's errors become them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from observability.events import app_event

log = logging.getLogger("adapters.cosmos")

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

# The substatus of Cosmos DB's 404 ReadSessionNotAvailable: the replica that answered has not caught up with the
# client's session token, so a document that exists is answered 404. The SDK retries it once and then raises it
# (azure-cosmos docs/ErrorCodesAndRetries.md, "404/1002";
# learn.microsoft.com/azure/cosmos-db/nosql/troubleshoot-not-found).
READ_SESSION_NOT_AVAILABLE = 1002

# The 403 substatus of a principal without a data role on the account (Azure's "Request blocked by Auth: principal
# [...] does not have required RBAC permissions"): the app's role assignment still propagating after a deployment
# (Azure RBAC documents up to about 10 minutes), or removed. Without a substatus, a 403 is the account's firewall
# (its network rules take up to 15 minutes to apply: learn.microsoft.com/azure/cosmos-db/troubleshoot-forbidden).
# Other 403s are not access refused: 1014 a partition key full, 5300 a metadata write (the Bicep's); 3 and 1008
# (a write region moved, the account's endpoint) the SDK handles itself.
PRINCIPAL_NOT_AUTHORIZED = 5301

# azure-cosmos keeps the last answer's headers on the client (``last_response_headers``), one dict shared by every
# thread, and writes the throttle counts into it after each request. Another thread's query may be copying that very
# dict at the time (4.17: ``__QueryFeed``'s ``response_headers.update``), and then raises RuntimeError "OrderedDict
# mutated during iteration" (the headers are not thread safe: Azure/azure-sdk-for-python#33496). Handlers of one
# worker share the client, so a query may meet it under load (seen with 16 at once). Nothing went wrong at Cosmos DB.
SDK_HEADER_RACE = "mutated during iteration"
QUERY_TRIES = 3  # a query only reads: run again at once, the race is a matter of microseconds


class StoreError(Exception):
    """Base of the state store's errors."""


class StoreUnavailable(StoreError):
    """Transient: throttled past the SDK's retries, timed out, the service unavailable or the partition moved.
    An ``orders`` message handler sends the message again for later (``submission.store_outage``); an
    activity fails (Durable retries or supervisor)."""


class StoreOutcomeUnknown(StoreUnavailable):
    """A ``StoreUnavailable`` after which a write may have committed: its response was lost (the
    connection dropped after the request was sent), or the service answered 408 or 500. The other
    transient failures, 410, 429, 449 and 503 and a request that could not be sent, say the write was not
    carried out (Cosmos DB returns 503 only for a request it did not process, 410 for one whose partition moved).
    Only a caller whose next step depends on whether the write landed needs the difference
    (``submission/payments.py``)."""


class StoreRefused(StoreUnavailable):
    """Cosmos DB refused the app's identity: a 401 (a token it does not take: expired, another audience or tenant) or
    a 403 of access (``PRINCIPAL_NOT_AUTHORIZED``, or the firewall's). Nothing was carried out. Handled as the store
    unavailable for a bounded time, because a role assignment propagating is exactly that (an ``orders`` message is
    sent again for later, an activity fails and is retried); each is logged (``store_refused``), and the
    ``storeAccessRefused`` log alert rule pages once refusals have gone on for 20 minutes (docs/deploy.md)."""


def _identity_refused(exc: Any) -> bool:
    """A 401 or a 403 of access (``PRINCIPAL_NOT_AUTHORIZED``, or the firewall's, without a substatus) to a request
    signed with a token (the managed identity's). Not a 401 to a request signed with a key (``type=master``: local
    development's connection string, the emulator's key): a wrong key, or local authorization disabled on the
    account, is a setting to fix, never a propagation; it escapes as an unknown error, as it did, where a quiet retry
    loop would hide it (``tests/identity/test_redteam_refused2.py``)."""
    from urllib.parse import unquote

    if exc.status_code == 403:
        return exc.sub_status in (None, 0, PRINCIPAL_NOT_AUTHORIZED)
    if exc.status_code != 401:
        return False
    request = getattr(getattr(exc, "response", None), "request", None)
    signed = unquote(str(getattr(request, "headers", {}).get("authorization", "")))
    return not signed.startswith(("type=master", "type=resource"))


def store_refused(status: int, substatus: int, message: str) -> StoreRefused:
    """``StoreRefused``, logged as ``StoreRequestRefused`` (WARNING; status, substatus): one event per refused
    request, in whatever process and phase met it, so the ``storeAccessRefused`` log alert rule
    (infra/modules/alerts.bicep) sees a refusal that lasts, whatever restarts the hosts, and whether reads or only
    writes are refused (a Data Reader role). The local runner's injected refusals are made here too."""
    text = f"Cosmos DB {status}/{substatus}, the app's identity refused: {' '.join(message.split())[:300]}"
    app_event("StoreRequestRefused", text, logging.WARNING, status=status, substatus=substatus)
    return StoreRefused(text)


class StaleRead(StoreUnavailable):
    """A read older than its reader knows the document to be: another instance's write it has not caught up
    with (the account's Session consistency holds read-your-writes within one client only; another client is
    read from whichever replica answers). Transient: the replica catches up, the next try reads the write."""


class EtagMismatch(StoreError):
    """Conditional replace lost: someone changed the document since it was read (HTTP 412)."""


class AlreadyExists(StoreError):
    """Create of a document whose id exists (HTTP 409)."""


class ItemTooLarge(StoreError):
    """A write Cosmos DB refused as too large (HTTP 413 ``RequestEntityTooLarge``: an item is at most 2 MB, measured
    on the JSON it receives; learn.microsoft.com/azure/cosmos-db/concepts-limits, "Per-item limits"). Not transient:
    the same write is refused again. What a state record keeps is bounded to fit (``domain/records.py``;
    docs/design.md, "Contracts"), so one is a bug: logged ``ItemTooLarge`` where it is mapped."""


class ConcurrencyExhausted(StoreError):
    """A fenced update kept losing etag races while still owning the record."""


@contextmanager
def mapped_errors(item: str | None = None) -> Iterator[None]:
    """Cosmos SDK errors as store errors: 412 ``EtagMismatch``, 409 ``AlreadyExists``; throttling and
    unavailability ``StoreUnavailable``; a 404/1002 (a replica behind the session's writes) ``StaleRead``;
    timeouts, 500 and lost or cut answers ``StoreOutcomeUnknown``; no token from the credential (the managed
    identity) ``StoreUnavailable``; the identity refused (401, 403 of access) ``StoreRefused``; 413 ``ItemTooLarge``
    (logged, naming ``item``: the id of the document written); anything else unchanged."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        IncompleteReadError,
        ServiceRequestError,
        ServiceResponseError,
    )
    from azure.cosmos import exceptions as cx

    try:
        yield
    except cx.CosmosAccessConditionFailedError as exc:
        raise EtagMismatch(str(exc.message)) from exc
    except cx.CosmosResourceExistsError as exc:
        raise AlreadyExists(str(exc.message)) from exc
    except cx.CosmosHttpResponseError as exc:
        if exc.status_code == 404 and exc.sub_status == READ_SESSION_NOT_AVAILABLE:
            raise StaleRead(f"Cosmos DB 404/1002, read session not available: {exc.message}") from exc
        if exc.status_code in (408, 500):
            raise StoreOutcomeUnknown(f"Cosmos DB {exc.status_code}: {exc.message}") from exc
        if _identity_refused(exc):
            raise store_refused(exc.status_code or 0, exc.sub_status or 0, str(exc.message)) from exc
        if exc.status_code in (410, 429, 449, 503):  # 410: the partition moved (the SDK retries only a query's)
            raise StoreUnavailable(f"Cosmos DB {exc.status_code}: {exc.message}") from exc
        if exc.status_code == 413:
            what = f"document {item}" if item is not None else "a document"
            app_event(
                "ItemTooLarge",
                f"Cosmos DB refused to write {what}: larger than one item (413): {exc.message}",
                logging.ERROR,
                item=item,
            )
            raise ItemTooLarge(f"Cosmos DB 413: {what} is larger than one item can be: {exc.message}") from exc
        raise
    except IncompleteReadError as exc:  # answered, the answer cut short (not a ServiceResponseError): likewise
        raise StoreOutcomeUnknown(f"Cosmos DB's answer was cut short: {exc}") from exc
    except ServiceResponseError as exc:  # sent, no answer: it may have been carried out
        raise StoreOutcomeUnknown(f"Cosmos DB did not answer: {exc}") from exc
    except cx.CosmosClientTimeoutError as exc:  # the client's own timeout, checked after requests too
        raise StoreOutcomeUnknown(f"Cosmos DB: {exc}") from exc
    except ServiceRequestError as exc:  # never sent
        raise StoreUnavailable(f"Cosmos DB unreachable: {exc}") from exc
    except RuntimeError as exc:
        if SDK_HEADER_RACE not in str(exc):
            raise
        # after the answer came back: a write it met had been carried out
        raise StoreOutcomeUnknown(f"Cosmos SDK: another thread changed this answer's headers: {exc}") from exc
    except ClientAuthenticationError as exc:
        # The credential gave no token for the request (the managed identity endpoint failing, or not answering
        # within settings.IDENTITY_READ_TIMEOUT): raised before it was sent. The Cosmos SDK answers a refusal of its
        # own (401, 403) as a CosmosHttpResponseError, never this.
        raise StoreUnavailable(f"Cosmos DB: no token from the credential: {' '.join(str(exc).split())}") from exc


def read_or_none(container: ContainerProxy, item_id: str, partition_key: str) -> dict[str, Any] | None:
    """The document, or None when Cosmos DB answers that it does not exist: a 404 without a substatus. Any other 404
    is not that answer (``mapped_errors``: a 404/1002 is a ``StaleRead``, the document may well exist)."""
    from azure.cosmos.exceptions import CosmosResourceNotFoundError

    with mapped_errors():
        try:
            doc: dict[str, Any] = container.read_item(item_id, partition_key=partition_key)
        except CosmosResourceNotFoundError as exc:
            if exc.sub_status:
                raise
            return None
    return doc


def query_all(container: ContainerProxy, query: str, **options: Any) -> list[Any]:
    """Every result of ``query`` (``query_items`` with ``options``), errors mapped (``mapped_errors``). A query that
    met the SDK's header race (``SDK_HEADER_RACE``) is run again, up to ``QUERY_TRIES`` in all."""
    with mapped_errors():
        for attempt in range(1, QUERY_TRIES):
            try:
                return list(container.query_items(query, **options))
            except RuntimeError as exc:
                if SDK_HEADER_RACE not in str(exc):
                    raise
                log.info("Cosmos query run again: the SDK's shared headers changed under it (try %d): %s", attempt, exc)
        return list(container.query_items(query, **options))  # the last try: its race is mapped like any call's
