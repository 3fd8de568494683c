"""Documents in Cosmos DB and the domain's versioned records.

A record read from Cosmos carries the item's ``_etag`` as its opaque ``version`` (``stored``); every
write of a record that was read is conditional on that version, so a concurrent change is never
overwritten. It also carries the item's top-level keys this code does not know (``unknown_keys``: a
newer version's fields, read during a rolling upgrade or after a rollback), and so does each entry inside
it (a step, a compensation entry, a history entry, a deferred message...); every write puts them back
unchanged (``document_of``), so the older code keeps what the newer one wrote beside the fields it knows.
An entry the code changes keeps its unknown keys (``dataclasses.replace``); one it makes anew (a step started
again under a new request, the record's ``lastWrite``, a new review's default) has none: a newer field of the
entry before would be wrong about the new one.

The small documents beside the state records in the ``state`` container (deferral documents,
dependency health) are written only that way: a create that fails if the document appeared meanwhile,
or a replace on the version read (``ConditionalDocuments``); ``update_conditionally`` re-reads and
re-applies its change when it loses such a race, so concurrent writers never lose each other's
changes."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from adapters.cosmos.errors import AlreadyExists, ConcurrencyExhausted, EtagMismatch, mapped_errors, read_or_none
from adapters.cosmos.mapping import Record, from_document, to_document

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy


class Document(Record, Protocol):
    """A record stored as one item (a dataclass, its JSON form in ``mapping``): its id and the version
    it was read at (None: never stored)."""

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> str | None: ...

    @property
    def unknown_keys(self) -> Mapping[str, Any] | None: ...


def stored[D: Document](kind: type[D], item: dict[str, Any]) -> D:
    """The record of a Cosmos item, its ``version`` the item's ``_etag``, its ``unknown_keys`` (and those of
    each entry inside it) the keys ``kind`` does not have (None: none)."""
    return replace(from_document(kind, item), version=item.get("_etag"))


def document_of(record: Document) -> dict[str, Any]:
    """The document to write for ``record``: its own fields, and the keys of the document it was read from
    that this code does not know, unchanged, at the top and in every entry the record kept."""
    return to_document(record, stored=True)


class ConditionalDocuments[D: Document]:
    """Reads and conditional writes of one kind of document in a container."""

    def __init__(self, container: ContainerProxy, kind: type[D]) -> None:
        self._c = container
        self._kind = kind

    def get(self, doc_id: str, partition_key: str) -> D | None:
        doc = read_or_none(self._c, doc_id, partition_key)
        return None if doc is None else stored(self._kind, doc)

    def save(self, doc: D) -> D:
        """Create (``doc.version`` None; ``AlreadyExists`` if it exists) or replace on ``doc.version``
        (``EtagMismatch`` if it changed)."""
        from azure.core import MatchConditions

        with mapped_errors(doc.id):
            if doc.version is None:
                written = self._c.create_item(document_of(doc))
            else:
                written = self._c.replace_item(
                    doc.id, document_of(doc), etag=doc.version, match_condition=MatchConditions.IfNotModified
                )
        return stored(self._kind, written)


# Pauses between a lost race and the next read (``RacePause``): "full jitter", a random pause up to a
# ceiling that doubles with each race lost, from 10 ms to at most 320 ms.
RACE_PAUSE_FIRST_S = 0.01
RACE_PAUSE_MAX_S = 0.32


class RacePause:
    """What a writer of a document many others write at once (a dependency's health, written by every
    agent instance) does after a lost race: waits a random time up to ``RACE_PAUSE_FIRST_S`` doubled for
    each race lost so far (at most ``RACE_PAUSE_MAX_S``), so the losers spread out instead of reading and
    writing again together, when all but one lose again. ``sleep``: the clock's."""

    def __init__(self, sleep: Callable[[float], None], rng: random.Random) -> None:
        self._sleep = sleep
        self._rng = rng

    def __call__(self, lost: int) -> None:
        ceiling = min(RACE_PAUSE_MAX_S, RACE_PAUSE_FIRST_S * 2 ** min(lost - 1, 30))
        self._sleep(self._rng.uniform(0.0, ceiling))


def update_conditionally[D: Document, R](
    read: Callable[[], D | None],
    fresh: Callable[[], D],
    change: Callable[[D], tuple[D, R]],
    unchanged: Callable[[D | None, D, D], bool],
    save: Callable[[D], D],
    what: str,
    attempts: int = 5,
    pause: Callable[[int], None] | None = None,
) -> tuple[D, R]:
    """Read (``current``; None: start from ``base = fresh()``), apply ``change`` to the base (the new
    document and a result for the caller), and unless ``unchanged(current, base, updated)`` write it on
    the version read; on a lost race, read and apply again (after ``pause(races lost so far)``, if given).
    ``ConcurrencyExhausted`` (naming ``what``) after ``attempts`` lost races."""
    for attempt in range(attempts):
        if attempt and pause is not None:
            pause(attempt)
        current = read()
        base = current if current is not None else fresh()
        updated, result = change(base)
        if unchanged(current, base, updated):
            return base, result  # nothing to write
        try:
            return save(replace(updated, version=base.version)), result
        except (EtagMismatch, AlreadyExists):
            continue
    raise ConcurrencyExhausted(f"{what}: {attempts} races in a row")
