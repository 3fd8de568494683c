"""A speed-up for long simulations, not a change of behaviour.

The Durable SDK parses every history event's timestamp with ``dateutil``'s general-purpose parser,
on every replay of every episode: in a 1,000-order run that is most of the CPU time. The Durable
extension writes UTC with ``Z`` and up to seven fractional digits, trailing zeros dropped
(``...:05Z``, ``...:05.1234567Z``); this runner writes ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.
``datetime.fromisoformat`` reads every one of them to the instant ``dateutil`` reads (both keep six
digits); anything else still goes to ``dateutil``.
The replay tests do not use this: they exercise the SDK exactly as shipped."""

from __future__ import annotations

from datetime import datetime
from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import importlib

    from dateutil.parser import parse as slow_parse

    # the module, not the class of the same name its package re-exports
    module = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")

    def parse(text: Any, *args: Any, **kwargs: Any) -> datetime:
        if isinstance(text, str) and text.endswith("Z") and not args and not kwargs:
            try:
                return datetime.fromisoformat(text[:-1] + "+00:00")
            except ValueError:
                pass
        return slow_parse(text, *args, **kwargs)  # type: ignore[no-any-return]

    setattr(module, "dt_parse", parse)  # noqa: B010
    _installed = True
