"""The ops API through the real Functions runtime: every route, its status codes, paging and the
auth rules. Each request is an ``InvocationRequest`` the runner's host sends with ``RpcHttp``, as the
Functions host does (counted on ``host.invocation_requests``)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.compensation import complete_step_logged
from domain.states import ProcessState
from domain.transitions import begin_step
from tests.deadlines import just_past
from tests.operations.harness import OPERATOR, OpsHarness, easy_auth_header, first_review

pytestmark = pytest.mark.cosmos

ROUTES = {
    "ops_summary": ("ops/summary", ["GET"]),
    "ops_orders": ("ops/orders", ["GET"]),
    "ops_order": ("ops/orders/{orderId}", ["GET"]),
    "ops_resubmit": ("ops/orders/{orderId}/resubmit", ["POST"]),
    "ops_cancel": ("ops/orders/{orderId}/cancel", ["POST"]),
    "ops_compensate": ("ops/orders/{orderId}/compensate", ["POST"]),
    "ops_review": ("ops/orders/{orderId}/review", ["POST"]),
    "ops_console": ("ops/console", ["GET"]),
    "ops_console_asset": ("ops/console/{asset}", ["GET"]),
}
REASON = {"reason": "customer called, card replaced"}


def test_the_routes_are_in_the_index_as_http_triggers_behind_the_guard(functions):
    for name, (route, methods) in ROUTES.items():
        trigger = functions[name].trigger
        assert trigger["type"] == "httpTrigger", name
        assert (trigger["route"], [m.upper() for m in trigger["methods"]]) == (route, methods), name
        # anonymous at the Functions level: the platform authenticates, operations.auth authorises
        assert trigger["authLevel"].upper() == "ANONYMOUS", name


def test_every_request_is_an_invocation_of_the_runtime(ops):
    before = ops.host.invocation_requests
    for path in ("/api/ops/summary", "/api/ops/orders", "/api/ops/orders/nope", "/api/ops/console"):
        ops.request("GET", path)
    ops.request("POST", "/api/ops/orders/nope/resubmit", REASON)
    assert ops.host.invocation_requests - before == 5
    assert ops.host.executions["ops_order"] == 1 and ops.host.executions["ops_resubmit"] == 1
    # no route, no invocation: the host answers 404 itself
    assert ops.request("GET", "/api/ops/nothing-here").status == 404
    assert ops.request("DELETE", "/api/ops/summary").status == 404
    assert ops.host.invocation_requests - before == 5


# --- authentication and authorisation ---------------------------------------------------------------


def test_everything_is_refused_when_platform_authentication_is_off_even_with_a_principal_header(cosmos_db):
    spoofed = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("mallory", ("Orders.Read", "Orders.Operate"))}
    closed = OpsHarness(cosmos_db)  # no WEBSITE_AUTH_ENABLED, no local principal: the default
    try:
        closed.error("o-closed")
        for path in ("/api/ops/summary", "/api/ops/orders", "/api/ops/orders/o-closed", "/api/ops/console"):
            status, body = closed.get(path, spoofed)
            assert status == 503, path
        status, body = closed.post("/api/ops/orders/o-closed/resubmit", REASON, spoofed)
        assert status == 503 and "authentication is not enabled" in body["error"]
        assert closed.ctx is not None
        assert closed.ctx.states.get("o-closed").process_state is ProcessState.ERROR  # type: ignore[union-attr]
    finally:
        closed.close()


def test_easy_auth_principal_decides_401_403_and_200(easy_auth):
    easy_auth.error("o-auth")
    reader = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("reader@contoso.example", ("Orders.Read",))}
    operator = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("op@contoso.example", ("Orders.Read", "Orders.Operate"))}
    nobody = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("nobody@contoso.example", ())}

    assert easy_auth.get("/api/ops/summary")[0] == 401
    assert easy_auth.get("/api/ops/summary", {"X-MS-CLIENT-PRINCIPAL": "not base64 json!"})[0] == 401
    assert easy_auth.request("GET", "/api/ops/summary").headers.get("WWW-Authenticate")
    assert easy_auth.get("/api/ops/summary", nobody)[0] == 403
    assert easy_auth.get("/api/ops/summary", reader)[0] == 200
    status, body = easy_auth.post("/api/ops/orders/o-auth/resubmit", REASON, reader)
    assert status == 403 and "Orders.Operate" in body["error"]
    assert easy_auth.post("/api/ops/orders/o-auth/resubmit", REASON)[0] == 401
    status, body = easy_auth.post("/api/ops/orders/o-auth/resubmit", REASON, operator)
    assert status == 200 and body["by"] == "op@contoso.example"


def test_the_local_principal_is_used_and_request_headers_are_never_trusted_locally(cosmos_db):
    read_only = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL="dev@localhost:Orders.Read")
    try:
        read_only.error("o-local")
        spoofed = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("mallory", ("Orders.Read", "Orders.Operate"))}
        assert read_only.get("/api/ops/summary")[0] == 200
        status, body = read_only.post("/api/ops/orders/o-local/resubmit", REASON, spoofed)
        assert status == 403 and "dev@localhost" in body["error"]
    finally:
        read_only.close()


def test_the_local_principal_answers_only_requests_addressed_to_this_machine(ops):
    """Found by the red team (session 32) on 36c310f: ``func start`` listens on every interface and
    answers whatever ``Host`` a request names, and the local principal was given to every request. A web
    page whose DNS name is then rebound to 127.0.0.1 (DNS rebinding) sends its own name as ``Host`` and
    as ``Origin``: it read the API and passed the same-origin check of an action, run as the developer."""
    assert ops.ctx is not None
    before = ops.error("o-rebound")
    rebound = {"Host": "rebound.example:7071", "Origin": "http://rebound.example:7071"}
    for path in ("/api/ops/summary", "/api/ops/orders/o-rebound", "/api/ops/console"):
        status, body = ops.get(path, rebound)
        assert status == 403 and "rebound.example" in body["error"], (path, status)
    status, body = ops.post("/api/ops/orders/o-rebound/resubmit", REASON, rebound)
    assert status == 403 and ops.ctx.states.get("o-rebound") == before, body
    for host in ("127.0.0.1.rebound.example", "localhost.rebound.example:7071", "[::2]:7071"):
        assert ops.get("/api/ops/summary", {"Host": host})[0] == 403, host
    for host in ("127.0.0.1:7071", "localhost:7071", "LOCALHOST", "[::1]:7071"):
        assert ops.get("/api/ops/summary", {"Host": host})[0] == 200, host


def test_the_local_principal_is_ignored_on_app_service(cosmos_db):
    hosted = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, WEBSITE_SITE_NAME="orders-app")
    try:
        assert hosted.get("/api/ops/summary")[0] == 503
    finally:
        hosted.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "https://evil.example"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({"Origin": "http://127.0.0.1:7071", "Sec-Fetch-Site": "same-origin"}, 200),
    ],
)
def test_actions_are_refused_cross_origin(ops, headers, status):
    ops.error("o-origin")
    assert ops.post("/api/ops/orders/o-origin/resubmit", REASON, headers)[0] == status


# --- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("order_id", ["bad$id", "-starts-with-dash", "x" * 65, "a%20b"])
def test_malformed_order_ids_are_400(ops, order_id):
    assert ops.get(f"/api/ops/orders/{order_id}")[0] == 400
    assert ops.post(f"/api/ops/orders/{order_id}/resubmit", REASON)[0] == 400


@pytest.mark.parametrize(
    ("body", "status", "word"),
    [
        (b"not json", 400, "JSON"),
        (b"\xff\xfe", 400, "UTF-8"),
        ([1, 2], 400, "object"),
        ({}, 400, "reason"),
        ({"reason": "   "}, 400, "reason"),
        ({"reason": 7}, 400, "reason"),
        ({"reason": "x" * 501}, 400, "500"),
        ({"reason": "ok", "operator": "someone-else"}, 400, "operator"),
        ({"reason": "ok", "action": "retry"}, 400, "action"),
        ({"reason": "y" * 5000}, 413, "4096"),
    ],
)
def test_bad_action_bodies(ops, body, status, word):
    ops.error("o-body")
    answer_status, answer = ops.post("/api/ops/orders/o-body/resubmit", body)
    assert answer_status == status and word in answer["error"]
    assert ops.ctx is not None and ops.ctx.states.get("o-body").process_state is ProcessState.ERROR


def test_review_bodies_need_a_known_action_and_the_review_they_answer(ops):
    waiting = ops.awaiting_review("o-rv-body")
    review = first_review("o-rv-body")
    for body in ({"reason": "ok"}, {"reason": "ok", "action": "approve"}, {"reason": "ok", "action": 3}):
        status, answer = ops.post("/api/ops/orders/o-rv-body/review", {**body, "reviewId": review})
        assert status == 400 and "action" in answer["error"], body
    for bad in ({}, {"reviewId": ""}, {"reviewId": 7}, {"reviewId": "r" * 301}, {"reviewId": "a\nb"}):
        status, answer = ops.post("/api/ops/orders/o-rv-body/review", {"reason": "ok", "action": "retry", **bad})
        assert status == 400 and "reviewId" in answer["error"], bad
    assert ops.ctx is not None and ops.ctx.states.get("o-rv-body") == waiting  # nothing noted


def test_an_answer_naming_another_review_is_refused_with_the_one_that_waits(ops):
    waiting = ops.awaiting_review("o-rv-other")
    stale = "o-rv-other:1:charge-payment:review:0"
    status, answer = ops.post(
        "/api/ops/orders/o-rv-other/review", {"reviewId": stale, "action": "retry", "reason": "x"}
    )
    assert status == 409 and answer["reviewId"] == first_review("o-rv-other"), answer
    assert f"not {stale}" in answer["error"]
    assert ops.ctx is not None and ops.ctx.states.get("o-rv-other") == waiting


# --- reads -------------------------------------------------------------------------------------------


def test_summary_counts_states_and_lists_reviews_expired_orders_and_alerts(ops):
    ops.error("o-s-err")
    ops.pending("o-s-pend")
    ops.awaiting_review("o-s-review")
    ops.processing("o-s-late")
    alert = {"type": "OperatorAlert", "alertId": "a-1", "kind": "OrderFailed", "severity": "error", "summary": "x"}
    ops.broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(alert), message_id="a-1"))
    ops.clock.advance_to(ops.clock.now() + just_past(ops.ctx.settings.start_grace))  # the claim's start grace passes

    status, body = ops.get("/api/ops/summary")
    assert status == 200
    assert body["counts"]["Error"] == 1 and body["counts"]["Pending"] == 1 and body["counts"]["Processing"] == 2
    assert [r["orderId"] for r in body["waitingForReview"]] == ["o-s-review"]
    assert [r["orderId"] for r in body["expired"]] == ["o-s-late"]
    assert body["oldestProcessing"]["orderId"] == "o-s-late"
    assert [a["alertId"] for a in body["recentAlerts"]] == ["a-1"]


def test_the_summary_says_when_it_read_only_the_oldest_processing_records(ops, monkeypatch):
    """``MAX_IN_FLIGHT`` has no upper bound, the summary reads at most ``SUMMARY_PROCESSING_LIMIT`` Processing
    records: past that its review and expired counts are partial, and it says so (the console shows "N+")."""
    monkeypatch.setattr("operations.views.SUMMARY_PROCESSING_LIMIT", 3)
    for number in range(2):
        ops.processing(f"o-cap-{number}")
    assert ops.get("/api/ops/summary")[1]["processingCapped"] is False
    for number in range(2, 4):
        ops.processing(f"o-cap-{number}")
    status, body = ops.get("/api/ops/summary")
    assert status == 200 and body["counts"]["Processing"] == 4
    assert body["processingCapped"] is True


def test_orders_are_paged_newest_first_with_a_continuation(ops):
    for number in range(7):
        ops.pending(f"o-page-{number}")
        ops.clock.advance_to(ops.clock.now() + timedelta(seconds=1))
    ops.error("o-page-err")

    seen: list[str] = []
    continuation = None
    for _ in range(5):
        query = "pageSize=3" + (f"&continuation={_quote(continuation)}" if continuation else "")
        status, body = ops.get(f"/api/ops/orders?{query}")
        assert status == 200 and len(body["orders"]) <= 3
        seen += [row["orderId"] for row in body["orders"]]
        continuation = body["continuation"]
        if continuation is None:
            break
    assert seen == ["o-page-err", *(f"o-page-{n}" for n in range(6, -1, -1))]
    status, body = ops.get("/api/ops/orders?state=Error")
    assert [row["orderId"] for row in body["orders"]] == ["o-page-err"]
    assert body["orders"][0] | {"processState": "Error", "attempt": 1, "failureCount": 0} == body["orders"][0]
    assert ops.get("/api/ops/orders?state=Lost")[0] == 400
    assert ops.get("/api/ops/orders?pageSize=0")[0] == 400
    assert ops.get("/api/ops/orders?pageSize=101")[0] == 400


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def test_an_unknown_order_is_404(ops):
    status, body = ops.get("/api/ops/orders/o-none")
    assert status == 404 and "o-none" in body["error"]
    for action in ("resubmit", "cancel", "compensate", "review"):
        body_sent = (
            {"reason": "x", "action": "retry", "reviewId": first_review("o-none")} if action == "review" else REASON
        )
        assert ops.post(f"/api/ops/orders/o-none/{action}", body_sent)[0] == 404, action


def test_the_console_and_its_assets_are_served_without_outside_resources(ops):
    page = ops.request("GET", "/api/ops/console")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        answer = ops.request("GET", f"/api/ops/console/{name}")
        assert answer.status == 200 and answer.headers["Content-Type"].startswith(kind), name
        assert b"http://" not in answer.body and b"https://" not in answer.body, name
    assert ops.request("GET", "/api/ops/console/..%2Fauth.py").status == 404
    assert ops.request("GET", "/api/ops/console/secrets.txt").status == 404


# --- actions -----------------------------------------------------------------------------------------


def test_resubmit_moves_error_to_pending_recording_who_and_why_and_refuses_other_states(ops):
    ops.error("o-resub")
    ops.pending("o-resub-pending")
    status, body = ops.post("/api/ops/orders/o-resub/resubmit", REASON)
    assert status == 200 and body["order"]["processState"] == "Pending"
    assert ops.ctx is not None
    last = ops.ctx.states.get("o-resub").history[-1]
    assert (last.event, last.by, last.detail) == ("Resubmitted", "ops@contoso.example", REASON["reason"])
    status, body = ops.post("/api/ops/orders/o-resub-pending/resubmit", REASON)
    assert status == 409 and "Error" in body["error"]


def test_compensate_moves_error_to_compensating_and_refuses_pending(ops):
    ops.error("o-comp")
    ops.pending("o-comp-pending")
    status, body = ops.post("/api/ops/orders/o-comp/compensate", REASON)
    assert status == 200 and body["order"]["processState"] == "Compensating"
    assert ops.ctx is not None and ops.ctx.states.get("o-comp").history[-1].by == "ops@contoso.example"
    assert ops.post("/api/ops/orders/o-comp-pending/compensate", REASON)[0] == 409


def test_cancel_before_the_pivot_compensates_and_after_it_is_409(ops):
    ops.pending("o-cancel")
    assert ops.ctx is not None
    record = ops.processing("o-cancel-shipped")
    now = ops.clock.now()
    owner = str(record.locked_by)
    for step, agent in (("reserve-inventory", "inventory"), ("charge-payment", "payment")):
        started = begin_step(record, owner, step, agent, f"{owner}:{step}", now, now)
        record = ops.ctx.states.replace(replace(started, version=record.version))
        done = complete_step_logged(record, owner, step, {"ref": step}, now, now)
        record = ops.ctx.states.replace(replace(done, version=record.version))
    shipping = begin_step(record, owner, "arrange-shipment", "shipping", f"{owner}:ship", now, now)
    ops.ctx.states.replace(replace(shipping, version=record.version))

    status, body = ops.post("/api/ops/orders/o-cancel/cancel", REASON)
    assert status == 200 and body["order"]["processState"] == "Compensating"
    assert ops.ctx.states.get("o-cancel").history[-1].by == "ops@contoso.example"
    status, body = ops.post("/api/ops/orders/o-cancel-shipped/cancel", REASON)
    assert status == 409 and ("pivot" in body["error"] or "shipment" in body["error"])
    # the same cancel posted again (its answer lost): taken, nothing written
    status, body = ops.post("/api/ops/orders/o-cancel/cancel", REASON)
    assert (status, body["repeated"], body["order"]["processState"]) == (200, True, "Compensating")
    cancelled = ops.ctx.states.get("o-cancel")
    assert cancelled is not None
    ops.ctx.states.replace(cancelled.with_changes(ops.clock.now(), "CompensationClaimed", "supervisor"))
    # the same cancel again once its round claimed the record: still this cancel, taken (test_action_lost_response)
    assert ops.post("/api/ops/orders/o-cancel/cancel", REASON)[1]["repeated"] is True
    assert ops.post("/api/ops/orders/o-cancel/cancel", {"reason": "again"})[0] == 409  # already compensating


def test_review_is_409_unless_the_order_waits_for_one(ops):
    ops.error("o-no-review")
    status, body = ops.post(
        "/api/ops/orders/o-no-review/review",
        {"reviewId": first_review("o-no-review"), "reason": "x", "action": "retry"},
    )
    assert status == 409 and "does not wait for review" in body["error"]


def test_the_console_is_for_a_signed_in_caller_and_sends_an_anonymous_browser_to_sign_in(easy_auth):
    """Found by the red team (session 32) on 36c310f: the README says the console is for a caller
    "signed in", but the app served it and its script to anyone (only an app that cannot authenticate
    anyone refused it): the page then told an anonymous visitor to sign in, as text, after its first
    request failed. Now the page redirects to the platform's sign-in and back; its files are 401."""
    for path in ("/api/ops/console", "//api/ops/console"):
        page = easy_auth.request("GET", path)
        assert page.status == 302, (path, page.status, page.body[:100])
        assert page.headers["Location"] == "/.auth/login/aad?post_login_redirect_uri=/api/ops/console", page.headers
    for name in ("console.js", "console.css"):
        answer = easy_auth.request("GET", f"/api/ops/console/{name}")
        assert answer.status == 401 and b"sign in" in answer.body, (name, answer.status)
    signed_in = {"x-ms-client-principal": easy_auth_header("reader@contoso.example", ())}  # no role needed
    assert easy_auth.request("GET", "/api/ops/console", headers=signed_in).status == 200
    assert easy_auth.request("GET", "/api/ops/console/console.js", headers=signed_in).status == 200


def test_the_console_asked_for_at_another_address_redirects_to_its_own(ops):
    """Found by the red team (session 32) on 36c310f: ``/api/ops/console/`` and ``/api/ops/console/index.html``
    served the page, whose relative links then named ``/api/ops/console/console/console.js`` (no such
    route): an empty page. Now a 302 to ``/api/ops/console``, where they resolve."""
    for path in ("/api/ops/console/", "/api/ops/console/index.html", "//api/ops/console//"):
        answer = ops.request("GET", path)
        assert (answer.status, answer.headers.get("Location")) == (302, "/api/ops/console"), (path, answer.status)
    assert ops.request("GET", "/api/ops/console").status == 200


@pytest.mark.parametrize("action", ["resubmit", "cancel", "compensate", "review"])
def test_every_action_route_needs_the_operate_role_before_it_reads_anything(easy_auth, action):
    """Each POST route, not only resubmit: a reader is 403 and nobody signed in 401, whatever the body
    (a malformed one too: the role is checked first), and the record is untouched."""
    assert easy_auth.ctx is not None
    before = easy_auth.awaiting_review("o-roles")
    reader = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("reader@contoso.example", ("Orders.Read",))}
    good = {"reason": "x"} | ({"action": "fail", "reviewId": first_review("o-roles")} if action == "review" else {})
    for body in (good, b"not json"):
        status, answer = easy_auth.post(f"/api/ops/orders/o-roles/{action}", body, reader)
        assert status == 403 and "Orders.Operate" in answer["error"], (body, status, answer)
        assert easy_auth.post(f"/api/ops/orders/o-roles/{action}", body)[0] == 401
    assert easy_auth.ctx.states.get("o-roles") == before
