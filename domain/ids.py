"""Deterministic identifiers. Everything that must be stable across retries is derived here."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

from domain.text import carriable

# Service Bus refuses a MessageId longer than this (the SDK raises ValueError when the message is built).
MAX_MESSAGE_ID_LENGTH = 128
_DIGEST_CHARS = 32

ORDER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_ORDER_ID = re.compile(ORDER_ID_PATTERN)

# Attempts and compensation rounds share one counter per order (the record's ``attempt``), from 1.
MAX_ATTEMPT = 999_999_999
COMPENSATION_MARKER = "compensate"
# The orchestration instances an agent replies to, as ``instance_id`` and
# ``domain.compensation.compensation_instance_id`` build them: ``<orderId>:<attempt>`` and
# ``<orderId>:compensate:<round>``. Nothing else in them, so an id that passes is also safe as it is in
# a URL path segment (no ``/``, ``?``, ``#``, ``%``, ``.``, space or control character).
_NUMBER = rf"[1-9][0-9]{{0,{len(str(MAX_ATTEMPT)) - 1}}}"
_ORDER = ORDER_ID_PATTERN.removeprefix("^").removesuffix("$")
ORCHESTRATION_INSTANCE_PATTERN = rf"^(?P<order>{_ORDER}):(?P<undo>{COMPENSATION_MARKER}:)?(?P<number>{_NUMBER})$"
_ORCHESTRATION_INSTANCE = re.compile(ORCHESTRATION_INSTANCE_PATTERN)


def is_valid_order_id(order_id: str) -> bool:
    return bool(_ORDER_ID.fullmatch(order_id))  # not match: its ``$`` also matches before a final newline


def instance_id(order_id: str, attempt: int) -> str:
    """One Durable orchestration instance per attempt: ``start_new`` never collides with a
    running instance, and never overwrites an earlier attempt's history."""
    return f"{order_id}:{attempt}"


def instance_order_id(instance: str) -> str | None:
    """The order of ``instance`` if it is an id ``instance_id`` or ``compensation_instance_id`` builds
    (a forward attempt or a compensation round, numbered 1 to ``MAX_ATTEMPT``), else None."""
    match = _ORCHESTRATION_INSTANCE.fullmatch(instance)
    return match.group("order") if match else None


def instance_number(instance: str) -> int | None:
    """The attempt (or compensation round) ``instance`` was started for, when ``instance_id`` or
    ``compensation_instance_id`` built it; None for any other id."""
    match = _ORCHESTRATION_INSTANCE.fullmatch(instance)
    return int(match.group("number")) if match else None


def is_compensation_instance(instance: str) -> bool:
    """Whether ``instance`` is a compensation round's (``<orderId>:compensate:<round>``): its agent requests are
    undos. False for a forward attempt's and for any id this app does not build."""
    match = _ORCHESTRATION_INSTANCE.fullmatch(instance)
    return bool(match and match.group("undo"))


def url_instance_id(instance: str) -> str:
    """``instance`` as the Durable client may paste it into a URL path (the SDK escapes nothing): the
    same text for every id this app builds (letters, digits, ``_``, ``-``, ``:``), anything else
    percent-escaped, so that no id can add a path segment, a query or a fragment to the call (``.`` and
    ``~`` too, which ``quote`` leaves: ``.`` or ``..`` as a segment is one a URL normaliser removes)."""
    return quote(instance, safe=":").replace(".", "%2E").replace("~", "%7E")


def request_id(instance: str, step: str, agent: str) -> str:
    """The id of one agent request: unique per attempt, step and agent, stable under replay."""
    return f"{instance}:{step}:{agent}"


def idempotency_key(order_id: str, step: str) -> str:
    """Stable across every attempt of a step, so a retried charge is never a second charge."""
    return f"{order_id}:{step}"


def bounded(message_id: str, limit: int = MAX_MESSAGE_ID_LENGTH, *, separator: str = "#") -> str:
    """``message_id`` as is when it fits ``limit``; otherwise its head, ``separator`` and a SHA-256
    digest of the whole, ``limit`` characters in all. Deterministic, so a repeat still collapses in
    duplicate detection, and two different long ids stay different. Every MessageId built from
    something a user chose (order ids, queue names, notification ids) goes through here."""
    if len(message_id) <= limit:
        return message_id
    digest = hashlib.sha256(message_id.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    return f"{message_id[: limit - _DIGEST_CHARS - len(separator)]}{separator}{digest}"


def alert_id(kind: str, order_id: str | None, discriminator: str | int = "") -> str:
    """An operator alert's id (its MessageId on ``operator-alerts``): the same alert raised again collapses in
    duplicate detection. On one line (``carriable``): a discriminator read from a record an older version wrote (a
    payment's ``notificationId``) may hold a line break, which the alert's id must not carry into log lines; the same
    text for every other id."""
    joined = ":".join(str(p) for p in ("alert", kind, order_id or "-", discriminator) if p != "")
    return bounded(carriable(joined))


# An orchestration instance id must not contain ``#`` (the Durable extension refuses ``/``, ``\``,
# ``#``, ``?`` and control characters: ``DurableClient.StartNewAsync``), and the Durable client puts the
# id in the start URL as it is, where a ``#`` would end the path: the extension would start the head
# alone. A bounded instance id puts ``:`` before its digest instead.
INSTANCE_DIGEST_SEPARATOR = ":"


def bounded_instance_id(instance: str, limit: int) -> str:
    """``bounded`` for an orchestration instance id: ``:`` before the digest, never ``#``."""
    return bounded(instance, limit, separator=INSTANCE_DIGEST_SEPARATOR)


def reply_message_id(request: str) -> str:
    return bounded(f"{request}:reply")


def status_message_id(order_id: str, status: str, attempt: int) -> str:
    return bounded(f"{order_id}:{status}:{attempt}")
