"""The profile's ``cosmos.service_fault_rate``: Cosmos DB refusing a request as Azure does, answered by the protocol
server below the SDK (``localrun/cosmos_faults.cjs``), so that the azure-cosmos SDK's own retry policies run between
the app and the fault as on Azure, and the app meets only what they give up on.

The runner's other Cosmos faults (``cosmos.throttle_rate``, ``unavailable_rate``, ``outages``, ``lost_response_rate``)
are raised above the SDK as the store errors the SDK's would become. Here each try the SDK makes of a document request
(a point read, a query's page, a create, a replace) is refused at the rate, with one of the answers that say the
request was not carried out, drawn evenly among those Azure gives that operation: 429 with ``x-ms-retry-after-ms``
(retried nine times), 503 (once, after 500 ms), 410/1002 (a partition that moved: a query's page is retried once its
routing map is refreshed, a point operation not), 449 for a write (never retried), 404/1002 for a read (a replica
behind the session: once). A refusal after which a write may have landed is ``cosmos.lost_response_rate``'s, above the
SDK, where the runner's audit knows it landed. Counted as ``cosmos_service_faults``."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Mapping

_DOCS = re.compile(r"/colls/[^/]+/docs(/[^/]+)?/?$")

_EVERY = ({"status": 429}, {"status": 503}, {"status": 410, "substatus": 1002})
_BY_OPERATION = {
    "read": (*_EVERY, {"status": 404, "substatus": 1002}),
    "write": (*_EVERY, {"status": 449}),
}


def operation(method: str, path: str, headers: Mapping[str, str]) -> str | None:
    """``read`` (a point read or a query's page), ``write`` (a create, replace, upsert, patch or delete), or None for
    a request that is not a document's (the account, a database, a container, the routing map)."""
    found = _DOCS.search(path)
    if found is None:
        return None
    if method == "GET":
        return "read"
    query = str(headers.get("x-ms-documentdb-isquery", "")).lower() == "true" or str(
        headers.get("Content-Type", headers.get("content-type", ""))
    ).startswith("application/query+json")
    if method == "POST" and query:
        return "read"
    return "write" if method in ("POST", "PUT", "PATCH", "DELETE") else None


class ServiceFaults:
    """``decide(method, path, headers)``: the ``x-localrun-fault`` header the server answers this try with, or None."""

    def __init__(self, rate: float, rng: random.Random, injected: Counter[str]) -> None:
        self._rate = rate
        self._rng = rng
        self._injected = injected

    def stop(self) -> None:
        """No more refusals (the runner reading its evidence at the end of the run)."""
        self._rate = 0.0

    def decide(self, method: str, path: str, headers: Mapping[str, str]) -> str | None:
        kind = operation(method, path, headers)
        if kind is None or not self._rate or self._rng.random() >= self._rate:
            return None
        answer = dict(self._rng.choice(_BY_OPERATION[kind]))
        if answer["status"] == 429:
            answer["retryAfterMs"] = self._rng.randint(1, 20)
        self._injected["cosmos_service_faults"] += 1
        return json.dumps(answer)
