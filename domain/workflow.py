"""The workflow table: the steps of processing an order, in order, and what each step is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Transport(StrEnum):
    IN_PROCESS = "in-process"  # the agent is an activity function in this app
    SERVICE_BUS = "service-bus"  # the agent is reached through a request queue and answers on agent-replies


class StepKind(StrEnum):
    COMPENSABLE = "compensable"  # has an undo action
    PIVOT = "pivot"  # point of no return: runs only after every critical check passed
    RETRIABLE = "retriable"  # after the pivot: must eventually succeed, never compensated


@dataclass(frozen=True)
class Agent:
    name: str
    service: str  # the remote service the agent wraps
    transport: Transport
    request_queue: str | None = None


@dataclass(frozen=True)
class Step:
    name: str
    agent: str
    kind: StepKind
    action: str  # what the agent asks its service to do
    undo_action: str | None = None
    fallback_agent: str | None = None  # an equivalent agent tried on a non-transient failure
    undo_data: tuple[str, ...] = ()  # result fields the undo needs (references only, never card data)
    prepaid_action: str | None = None  # a prepaid order's action instead of ``action`` (needs its payment)
    # the undo's answer kept on its log entry (references and amounts): what the undo actually did
    undo_result_data: tuple[str, ...] = ()

    def fallback_for(self, prepaid: bool) -> str | None:
        """The fallback agent that can take the step over for an order: none for a prepaid order (the
        customer paid at the first provider: the backup never received that payment, so a prepaid order
        never falls back, neither by the decision function nor by an operator's review)."""
        return None if prepaid else self.fallback_agent

    def serves(self, agent_name: str) -> bool:
        """The step's own agent, or its fallback."""
        return agent_name in (self.agent, self.fallback_agent)


AGENTS: dict[str, Agent] = {
    a.name: a
    for a in (
        Agent("inventory", "inventory", Transport.IN_PROCESS),
        Agent("payment", "payment", Transport.SERVICE_BUS, "payment-requests"),
        # A second payment provider, tried when the first one refuses a charge for good.
        Agent("payment-backup", "payment_backup", Transport.SERVICE_BUS, "payment-backup-requests"),
        Agent("shipping", "shipping", Transport.SERVICE_BUS, "shipping-requests"),
    )
}

WORKFLOW: tuple[Step, ...] = (
    Step(
        "reserve-inventory",
        "inventory",
        StepKind.COMPENSABLE,
        action="reserve",
        undo_action="release",
        undo_data=("reservationId",),
        undo_result_data=("releaseId", "units"),
    ),
    Step(
        "charge-payment",
        "payment",
        StepKind.COMPENSABLE,
        action="charge",
        undo_action="refund",
        fallback_agent="payment-backup",
        undo_data=("chargeId", "amountCents"),
        prepaid_action="capture",
        undo_result_data=("refundId", "amountCents"),
    ),
    Step("arrange-shipment", "shipping", StepKind.PIVOT, action="ship"),
)

STEPS: dict[str, Step] = {s.name: s for s in WORKFLOW}


def step(name: str) -> Step:
    try:
        return STEPS[name]
    except KeyError:
        raise ValueError(f"unknown workflow step {name!r}") from None


def agent(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r}") from None


def prepaid_step() -> Step:
    """The step that, for a prepaid order, waits for the payment provider's notification and
    captures against it instead of charging."""
    return next(s for s in WORKFLOW if s.prepaid_action is not None)


def request_queues() -> dict[str, str]:
    """Agent name -> request queue, for every Service Bus agent."""
    return {a.name: a.request_queue for a in AGENTS.values() if a.request_queue}
