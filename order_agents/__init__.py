"""Agents: each wraps one remote service, retries transient failures inside its deadline, and
answers the scheduler (in-process as an activity, or over Service Bus request/reply queues)."""
