"""HTTP plumbing of the ops API: JSON replies, the checks every request gets (authentication, the
app role, same-origin JSON for actions) and the validation of ids and bodies. Plain code: the
blueprint turns a ``Reply`` into an ``azure.functions.HttpResponse``."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from adapters.cosmos.state_store import SeekKey
from contracts.parsing import RepeatedName, each_name_once
from domain.compensation_policy import REVIEW_CHOICES
from domain.ids import is_valid_order_id
from domain.text import blank, has_line_break, one_line, uncarriable
from operations.auth import Principal, Refusal, authorize
from settings import Settings

MAX_BODY_BYTES = 4096
MAX_REASON_CHARS = 500
MAX_CONTINUATION_CHARS = 4096
MAX_REVIEW_ID_CHARS = 300  # "<orderId>:<attempt>:<step>:review:<n>": an order id is at most 64
# the entries a compensate may name as undone by hand: the log holds one per compensable step and agent it went to
MAX_BY_HAND_ENTRIES = 20
MAX_BY_HAND_SEQ = 1000
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)


def json_reply(status: int, value: Any) -> Reply:
    return Reply(status, json.dumps(value, default=str).encode("utf-8"))


def error(status: int, message: str) -> Reply:
    return json_reply(status, {"error": message, "status": status})


def refused(refusal: Refusal) -> Reply:
    headers = {"WWW-Authenticate": 'Bearer realm="ops"'} if refusal.status == 401 else {}
    return Reply(
        refusal.status, json.dumps({"error": refusal.message, "status": refusal.status}).encode(), headers=headers
    )


SIGN_IN_PATH = "/.auth/login/aad"  # App Service authentication's Entra ID sign-in


def sign_in_redirect(url: str) -> Reply:
    """302 to the platform's sign-in, back to ``url``'s path afterwards: one leading slash, so that it
    stays a path on this app (``//host/...`` would name another host)."""
    back = quote("/" + urlsplit(url).path.lstrip("/"), safe="/")
    location = f"{SIGN_IN_PATH}?post_login_redirect_uri={back}"
    return Reply(302, b"", "text/plain; charset=utf-8", {"Location": location})


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


def same_origin_json(url: str, headers: Mapping[str, str]) -> Reply | None:
    """Actions are refused cross-origin: the body must be JSON (a cross-site form cannot send it
    without a CORS preflight, which this app never answers), and a browser's ``Origin`` /
    ``Sec-Fetch-Site`` must say the request came from this app's own pages."""
    content_type = str(headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        return error(415, "send the action as a JSON body (Content-Type: application/json)")
    site = str(headers.get("sec-fetch-site") or "").lower()
    if site and site not in ("same-origin", "none"):
        return error(403, f"cross-origin request refused (Sec-Fetch-Site: {site})")
    origin = str(headers.get("origin") or "").lower()
    if origin:
        allowed = {_origin(url)}
        host = str(headers.get("x-forwarded-host") or headers.get("host") or "").lower()
        if host:
            allowed |= {f"https://{host}", f"http://{host}"}
        if origin not in allowed:
            return error(403, f"cross-origin request refused (Origin: {origin})")
    return None


def check_access(settings: Settings, headers: Mapping[str, str], role: str) -> Principal | Reply:
    found = authorize(settings, headers, role)
    return refused(found) if isinstance(found, Refusal) else found


def checked_order_id(value: str | None) -> str | Reply:
    if value is None or not is_valid_order_id(value):
        return error(400, "malformed order id: 1-64 letters, digits, '-' or '_', starting with a letter or digit")
    return value


MAX_SEQUENCE_NUMBER = 2**63 - 1  # a Service Bus sequence number is an int64


def checked_sequence_number(value: str | None) -> int | Reply:
    """A deferred message's sequence number from the route (its deferral entry's ``sequenceNumber``): ASCII digits,
    1 to 2**63 - 1."""
    text = value or ""
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or not 0 < int(text) <= MAX_SEQUENCE_NUMBER:
        return error(400, "malformed sequence number: the deferred entry's sequenceNumber, 1 to 2**63 - 1")
    return int(text)


# The list's query parameters (``GET ops/orders``), as the API documents them.
LIST_PARAMETERS = ("state", "pageSize", "continuation")


def query_parameters(params: Mapping[str, str], takes: tuple[str, ...], what: str) -> dict[str, str] | Reply:
    """A read's query parameters by their documented names (``takes``; none for the summary and the order page),
    matched whatever their case, as the Functions host matches them: it reads the query case-insensitively (a name
    given twice in two cases is one, its values joined) and hands the worker the first spelling sent, so
    ``?State=Error`` names the list's ``state``. 400 for any other name, naming it and what the read (``what``)
    takes: a filter the read does not know would be ignored, and everything served as if it were the filtered
    answer (the list's ``?status=Error``: every order, those in flight too; ``ops/summary?state=Error``: every
    state's; ``ops/orders/{orderId}?attempt=2``: every attempt)."""
    known = {name.lower(): name for name in takes}
    accepted = f"takes {', '.join(takes)}, each once" if takes else "takes no query parameter"
    found: dict[str, str] = {}
    for name, value in params.items():
        documented = known.get(name.lower())
        if documented is None or documented in found:
            given = "unknown query parameter" if documented is None else "query parameter given twice"
            return error(400, f"{given} {name[:40]!r}: {what} {accepted}")
        found[documented] = value
    return found


def list_parameters(params: Mapping[str, str]) -> dict[str, str] | Reply:
    """The list's query parameters (``LIST_PARAMETERS``), or the 400 of ``query_parameters``."""
    return query_parameters(params, LIST_PARAMETERS, "the list")


def no_parameters(params: Mapping[str, str], what: str) -> Reply | None:
    """The 400 of ``query_parameters`` for a read that takes no query parameter (``what``: the summary, the order
    page), or None when it was given none."""
    found = query_parameters(params, (), what)
    return found if isinstance(found, Reply) else None


def no_query(params: Mapping[str, str]) -> Reply | None:
    """400 for an action request with a query parameter: an action is its JSON body (``parse_action_body``), and a
    field sent in the query would be ignored while the action is taken (``compensate?undoneByHand=2``: the next round
    sends again the undo the operator made by hand)."""
    if not params:
        return None
    names = ", ".join(repr(name[:40]) for name in sorted(params)[:5])
    return error(400, f"an action takes no query parameter ({names}): send its fields in the JSON body")


def page_size(text: str | None, default: int, maximum: int) -> int | None:
    """The ``pageSize`` query parameter: ASCII digits only (``str.isdigit`` also takes superscripts
    and other digits ``int`` refuses), 1 to ``maximum``; None when it is not one."""
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    size = int(text)
    return size if 1 <= size <= maximum else None


# The version of the list's token: ``<list>:k1.<base64url of the JSON [updatedAt, id] of the page's last row>``.
# Before it the API handed out Cosmos DB's continuation token after the list's name, which the SDK cannot
# resume a cross-partition ORDER BY from on Azure (docs/design.md, "Queries and indexes"): such a token is
# refused, the client starts from the first page.
LIST_TOKEN_VERSION = "k1."
MAX_KEY_CHARS = 255  # a Cosmos DB id is at most 255 characters; an updatedAt is a timefmt timestamp


def list_token(state: str | None, after: SeekKey | None) -> str | None:
    """The continuation the API hands out for a page of the list of ``state`` (None: every order): where
    the page ended (``after``: its last row's updatedAt and id), opaque to the client, after the list's
    name (``Error:...``, ``any:...``), so that it resumes that list only (``store_token``)."""
    if after is None:
        return None
    packed = json.dumps([after.key, after.id], separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return f"{state or 'any'}:{LIST_TOKEN_VERSION}{base64.urlsafe_b64encode(packed).decode('ascii')}"


def store_token(state: str | None, text: str) -> SeekKey | Reply:
    """Where a continuation ``list_token`` made for the list of ``state`` resumes, or the 400 for one made
    for another list (a page of it would silently leave out that list's newer orders), one not made by
    this API, or one an earlier version made (a Cosmos DB token)."""
    scope, sep, token = text.partition(":")
    expected = str(state or "any")  # a ProcessState's repr would name the enum, not the list
    if not sep or not token:
        return error(400, "invalid continuation token: not one this API handed out; start from the first page")
    if scope != expected:
        return error(
            400,
            f"invalid continuation token: it resumes the list of {scope[:40]!r} orders, not of {expected!r}; "
            "start from the first page",
        )
    after = _seek_key(token)
    if after is None:
        return error(
            400,
            "invalid continuation token: not one this version of the API hands out (an earlier version's, or "
            "altered); start from the first page",
        )
    return after


def _seek_key(token: str) -> SeekKey | None:
    if not token.startswith(LIST_TOKEN_VERSION) or not token.isascii():
        return None
    try:
        packed = base64.b64decode(token.removeprefix(LIST_TOKEN_VERSION), altchars=b"-_", validate=True)
        key = json.loads(packed)
    except (binascii.Error, ValueError):
        return None
    if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)):
        return None
    if any(len(k) > MAX_KEY_CHARS or uncarriable(k) is not None or has_line_break(k) for k in key):  # a key is one line
        return None
    return SeekKey(key[0], key[1])


@dataclass(frozen=True)
class ActionBody:
    reason: str
    action: str | None = None
    review_id: str | None = None  # a review answer names the review it answers
    # a compensate names the entries of a CompensationFailed order the operator undid by hand (their seq)
    undone_by_hand: tuple[int, ...] = ()


def parse_action_body(body: bytes, *, review: bool, by_hand: bool = False) -> ActionBody | Reply:
    """``{"reason": "..."}`` (and ``"action"`` and ``"reviewId"`` for a review: an answer says which
    pause it answers, so that one posted again after its review closed is never taken as the answer
    to the next one; and, with ``by_hand`` (a compensate), ``"undoneByHand"``: the ``seq`` of each entry
    of a ``CompensationFailed`` order the operator undid by hand, ``domain.compensation.settle_by_hand``).
    Anything else, including who is
    acting (that comes from the principal), is refused, and so is a reason no record or message can
    carry (a lone surrogate, control characters: ``domain.text``); its line breaks fold to spaces."""
    if len(body) > MAX_BODY_BYTES:
        return error(413, f"body over {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(body.decode("utf-8"), object_pairs_hook=each_name_once)
    except RepeatedName as exc:  # which one counts would be the reader's guess: a proxy's log may show the other
        return error(400, str(exc))
    except (UnicodeDecodeError, ValueError):
        return error(400, "the body is not UTF-8 JSON")
    if not isinstance(data, dict):
        return error(400, "the body must be a JSON object")
    allowed = {"reason", "action", "reviewId"} if review else {"reason", "undoneByHand"} if by_hand else {"reason"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        return error(400, f"unknown fields: {', '.join(unknown)} (who acts comes from your sign-in)")
    reason = data.get("reason")
    if not isinstance(reason, str) or blank(reason):
        return error(400, "a non-empty 'reason' is required (something visible)")
    if len(reason) > MAX_REASON_CHARS:
        return error(400, f"'reason' is longer than {MAX_REASON_CHARS} characters")
    why_not = uncarriable(reason)
    if why_not is not None:  # it would go on the record, and from there into alerts and statuses
        return error(400, f"'reason' cannot be recorded: {why_not}")
    if not review:
        by_hand_entries = data.get("undoneByHand", [])
        if not (
            isinstance(by_hand_entries, list)
            and len(by_hand_entries) <= MAX_BY_HAND_ENTRIES
            and all(type(seq) is int and 0 < seq <= MAX_BY_HAND_SEQ for seq in by_hand_entries)
        ):
            return error(
                400,
                f"'undoneByHand' must be a list of at most {MAX_BY_HAND_ENTRIES} entry numbers (the order's "
                "compensation[].seq you undid by hand)",
            )
        return ActionBody(one_line(reason), undone_by_hand=tuple(sorted(set(by_hand_entries))))
    action = data.get("action")
    if action not in REVIEW_CHOICES:
        return error(400, f"'action' must be one of {', '.join(REVIEW_CHOICES)}")
    review_id = data.get("reviewId")
    if not isinstance(review_id, str) or not review_id or len(review_id) > MAX_REVIEW_ID_CHARS:
        return error(
            400,
            "a 'reviewId' is required: the id of the review you answer (the order's review.reviewId, the "
            "ReviewRequired alert's details.reviewId)",
        )
    if uncarriable(review_id) is not None or review_id != one_line(review_id):
        return error(400, "'reviewId' is not a review id")
    return ActionBody(one_line(reason), str(action), review_id)
