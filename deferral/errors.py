"""Why a message cannot be applied right now, besides the state store being down."""

from __future__ import annotations


class DependencyUnavailable(Exception):
    """A dependency of applying a message (not the state store) is temporarily unavailable: the
    message is deferred and tried again by a scheduled ``RetryDeferred``. (When the state store
    itself is down the message is abandoned instead: nothing could even record the deferral.)"""
