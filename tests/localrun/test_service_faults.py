"""``cosmos.service_fault_rate``: Cosmos DB's refusals answered by the protocol server below the SDK
(``localrun/service_faults.py``), so that the SDK's own retry policies run in a simulation as on Azure."""

from __future__ import annotations

import json
import random
from collections import Counter

from localrun.profile import Profile
from localrun.report import build_report
from localrun.service_faults import ServiceFaults, operation
from localrun.simulation import SimulationConfig, run_simulation

DOCS = "/dbs/localrun/colls/state/docs"
QUERY = {"x-ms-documentdb-isquery": "True", "Content-Type": "application/query+json"}


def test_only_document_requests_are_refused_each_with_an_answer_azure_gives_it() -> None:
    assert operation("GET", f"{DOCS}/ord-1/", {}) == "read"
    assert operation("POST", f"{DOCS}/", QUERY) == "read"
    assert operation("POST", f"{DOCS}/", {}) == "write"  # a create
    assert operation("PUT", f"{DOCS}/ord-1/", {}) == "write"
    for other in ("/dbs/localrun/colls/state/pkranges/", "/dbs/localrun/colls/state/", "/dbs/localrun/", "/"):
        assert operation("GET", other, {}) is None
    injected: Counter[str] = Counter()
    faults = ServiceFaults(1.0, random.Random(1), injected)
    reads = {json.loads(faults.decide("GET", f"{DOCS}/ord-1/", {}) or "{}")["status"] for _ in range(200)}
    writes = {json.loads(faults.decide("PUT", f"{DOCS}/ord-1/", {}) or "{}")["status"] for _ in range(200)}
    assert reads == {429, 503, 410, 404} and writes == {429, 503, 410, 449}
    assert faults.decide("GET", "/dbs/localrun/colls/state/pkranges/", {}) is None
    assert injected["cosmos_service_faults"] == 400
    faults.stop()
    assert faults.decide("GET", f"{DOCS}/ord-1/", {}) is None


def test_a_run_under_the_services_refusals_holds_every_invariant_through_the_sdks_retries() -> None:
    profile = Profile.parse({"cosmos": {"service_fault_rate": 0.15}, "orders": {"duplicate_submit_rate": 0.3}})
    report = build_report(run_simulation(SimulationConfig(orders=12, seed=1, profile=profile)))
    assert report["injected_faults"]["cosmos_service_faults"] > 0
    assert {name: n for name, n in report["invariants"].items() if n} == {}
    assert not report["horizon_reached"]
