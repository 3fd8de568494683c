"""The operator role: an HTTP API under ``/api/ops/`` and the web console served beside it.

Operators see orders (summary, lists, one order with its history, attempts and compensation log)
and act on them (resubmit, cancel, compensate, answer a review) through the domain's own moves.
Who acts comes from the platform's authenticated principal (App Service authentication), never from
the request body (``operations.auth``)."""
