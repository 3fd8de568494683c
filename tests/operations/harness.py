"""The ops API through the real Functions runtime: a ``RuntimeHarness`` (the runner's host over an
in-process broker and the Cosmos protocol server) with the operator read model, and helpers to send
HTTP requests as the host does and to write state records the way the app's moves leave them."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from contracts.names import ORDERS_QUEUE
from domain import compensation, transitions
from domain.records import StateRecord
from domain.review import PendingReview, decide_by_time, pending_review
from localrun.host import local_settings_example
from localrun.worker.http import HttpAnswer, HttpRequestData
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

BASE = "http://127.0.0.1:7071"
OPERATOR = "ops@contoso.example:Orders.Read,Orders.Operate"


def easy_auth_header(name: str, roles: tuple[str, ...]) -> str:
    """The ``X-MS-CLIENT-PRINCIPAL`` App Service passes for an Entra ID sign-in."""
    claims = [{"typ": "name", "val": name}] + [{"typ": "roles", "val": r} for r in roles]
    principal = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return base64.b64encode(json.dumps(principal).encode()).decode()


class OpsHarness(RuntimeHarness):
    def __init__(self, cosmos_db: Any, **settings: str) -> None:
        super().__init__({**local_settings_example(), **settings}, cosmos_db=cosmos_db)  # every store, ops too

    def request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> HttpAnswer:
        raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        sent = dict(headers or {})
        if method == "POST" and "content-type" not in {k.lower() for k in sent}:
            sent["Content-Type"] = "application/json"
        return self.host.call_http(HttpRequestData(method, BASE + path, sent, raw))

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        answer = self.request("GET", path, headers=headers)
        return answer.status, json.loads(answer.body) if answer.body.startswith(b"{") else answer.body

    def post(self, path: str, body: Any, headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        answer = self.request("POST", path, body, headers)
        return answer.status, json.loads(answer.body) if answer.body else None

    def waiting_review(self, order_id: str) -> tuple[PendingReview, datetime]:
        """The review ``order_id`` waits for and the deadline its attempt decides at."""
        assert self.ctx is not None
        record = self.ctx.states.get(order_id)
        assert record is not None
        pending = pending_review(record)
        assert pending is not None, [h.event for h in record.history]
        deadline = decide_by_time(pending)
        assert deadline is not None
        return pending, deadline

    # --- records as the app's moves leave them -----------------------------------------------------

    def pending(self, order_id: str) -> StateRecord:
        assert self.ctx is not None
        return self.ctx.states.create(transitions.new_record(order_id, None, self.clock.now()))

    def processing(self, order_id: str) -> StateRecord:
        assert self.ctx is not None
        record = self.pending(order_id)
        claimed = transitions.claim(record, self.clock.now(), timedelta(seconds=60))
        return self.ctx.states.replace(replace(claimed, version=record.version))

    def error(self, order_id: str) -> StateRecord:
        assert self.ctx is not None
        record = self.processing(order_id)
        failed = transitions.fail(record, str(record.locked_by), None, "payment declined", self.clock.now())
        return self.ctx.states.replace(replace(failed, version=record.version))

    def awaiting_review(
        self, order_id: str, default_action: str | None = None, keep_for: timedelta | None = None
    ) -> StateRecord:
        """Paused at charge-payment for 10 minutes; ``default_action``: kept on the record as the attempt's
        ``await_review`` keeps it (None: as a record written before it was kept); ``keep_for``: ``completeBy``
        that long past the deadline (the attempt's ``START_GRACE_SECONDS``; None: at it)."""
        assert self.ctx is not None
        record = self.processing(order_id)
        owner = str(record.locked_by)
        until = self.clock.now() + timedelta(minutes=10)
        paused = compensation.await_review(
            record,
            owner,
            "charge-payment",
            f"{owner}:charge-payment:review:1",
            until,
            self.clock.now(),
            keep_until=until + keep_for if keep_for is not None else None,
            default_action=default_action,
        )
        return self.ctx.states.replace(replace(paused, version=record.version))


def post_at_once(harness: OpsHarness, posts: list[tuple[str, str, Any]], order_id: str) -> list[HttpAnswer]:
    """``posts`` (operator, action, JSON body) on ``order_id`` as signed in on App Service, handed to the host
    together, answered in order: they interleave wherever an invocation parks (a slow read, an awaited call)."""
    futures = []
    for operator, action, body in posts:
        headers = {
            "x-ms-client-principal": easy_auth_header(operator, ("Orders.Read", "Orders.Operate")),
            "Content-Type": "application/json",
        }
        url = f"{BASE}/api/ops/orders/{order_id}/{action}"
        futures.append(harness.host.submit_http(HttpRequestData("POST", url, headers, json.dumps(body).encode())))
    while not all(f.done() for f in futures):
        harness.host.pump()
        if harness.scheduler.run_one():
            continue
        due = harness.host.next_due()
        assert due is not None, "nothing left to run and no answer"
        harness.clock.advance_to(due)
    return [f.result() for f in futures]


def paused_for_review(
    cosmos_db: Any, order_id: str = "o-big", review_timeout_seconds: str = "600", **settings: str
) -> OpsHarness:
    """A harness where a high-value order's payment is declined by both providers, so its attempt has
    paused for an operator's review (``REVIEW_TIMEOUT_SECONDS``). The caller closes it. ``settings``: more."""
    made = OpsHarness(
        cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, REVIEW_TIMEOUT_SECONDS=review_timeout_seconds, **settings
    )
    assert made.ctx is not None
    declined = SimulatorConfig(permanent_error_rate=1.0)
    made.change_context(
        remote=remote_services(made.ctx.settings, made.clock, {"payment": declined, "payment_backup": declined}, seed=3)
    )
    body = order(orderId=order_id, lines=[{"sku": "SKU-9", "quantity": 1, "unitPriceCents": 150000}])
    made.send(ORDERS_QUEUE, json.dumps(body), order_id)
    made.run_until_idle()
    return made


def first_review(order_id: str) -> str:
    """The id of the first review of an order's first attempt (``paused_for_review``, ``awaiting_review``),
    which an answer posted to the ops API names."""
    return f"{order_id}:1:charge-payment:review:1"
