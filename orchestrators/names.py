"""Names of the orchestrator and activity functions. The orchestrator's name carries a version:
changing its code under in-flight instances breaks replay, so a change to the code an orchestrator
replays (``tests/orchestrators/test_orchestrator_rules.py`` lists those modules) that changes what
it schedules gets the next version (one exception, carried by the input instead: ``timerPerRound``,
``orchestrators/timers.py``; docs/design.md "Versions"). The scheduler is at ``_v4`` (a review
deadline closes the review with a fenced write, ``close_review``, before the attempt acts); ``_v3``
(its plan in its input, no ``load_order``) is the same code without that write and stays registered,
running, so its instances in flight at the upgrade finish as they began; ``_v2`` (fewer activities
per order than ``_v1``, issue 15) and ``_v1`` stay registered as retired names
(``orchestrators/retired.py``, docs/design.md "Versions")."""

SCHEDULER = "process_order_v4"
# The version before: its instances in flight at an upgrade run to their end under it (same code, no
# closing write at a review deadline); the starter starts only ``SCHEDULER``.
DRAINING_SCHEDULER = "process_order_v3"
# The versions whose paused attempt takes an operator's review answer, and those that close the review
# at its deadline before acting (an answer noted before the close is taken: domain.review.close_review).
REVIEW_TAKING_SCHEDULERS = (SCHEDULER, DRAINING_SCHEDULER)
REVIEW_CLOSING_SCHEDULERS = (SCHEDULER,)
# Earlier versions of the scheduler: an instance of one still in flight at an upgrade ends at its
# next replay without touching its record; the supervisor retries the order under ``SCHEDULER``.
RETIRED_SCHEDULERS = ("process_order_v2", "process_order_v1")
BEGIN_STEP = "begin_step"
SEND_AGENT_REQUEST = "send_agent_request"
FAIL_ORDER = "fail_order"
RELEASE_FOR_RETRY = "release_for_retry"
MARK_PROCESSED = "mark_processed"
PUBLISH_STATUS = "publish_status"
SETTLE_RETIRED_ATTEMPT = "settle_retired_attempt"
# The courier: delivers a status whose send failed where no durable timer was at hand (orchestrators/status.py).
DELIVER_STATUS = "deliver_status_v1"
# The alert courier: sends an operator alert whose send failed where it was raised by a trigger with a
# message in hand (orchestrators/alert.py), through its activity.
DELIVER_ALERT = "deliver_alert_v1"
SEND_ALERT = "send_alert"


def in_process_agent(agent: str) -> str:
    """The activity name of an in-process agent."""
    return f"agent_{agent}"


# Compensation (orchestrators/compensation.py) and the scheduler's hand-over to it.
COMPENSATION = "compensate_order_v1"
REQUEST_COMPENSATION = "request_compensation"
AWAIT_REVIEW = "await_review"
CLOSE_REVIEW = "close_review"
LOAD_COMPENSATION = "load_compensation"
BEGIN_UNDO = "begin_undo"
HOLD_UNDO = "hold_undo"
RELEASE_UNDO = "release_undo"
RECORD_UNDO = "record_undo"
FINISH_COMPENSATION = "finish_compensation"
FAIL_COMPENSATION = "fail_compensation"

# The Durable external event an operator raises to resolve a review pause.
REVIEW_DECISION_EVENT = "ReviewDecision"
