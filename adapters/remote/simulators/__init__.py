"""Simulated remote services (inventory, payment, shipping): configurable latency, error rates and
outage windows; they honour idempotency keys and fencing tokens and record every side effect in a
ledger, so a test can prove that no order was charged twice."""
