"""Store errors the rest of the app understands, independent of the Cosmos SDK."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the state store's errors."""


class StoreUnavailable(StoreError):
    """Transient: throttled past the SDK's retries, timed out, or the service is unavailable.
    A message handler abandons (redelivery); an activity fails (Durable retries or supervisor)."""


class EtagMismatch(StoreError):
    """Conditional replace lost: someone changed the document since it was read (HTTP 412)."""


class AlreadyExists(StoreError):
    """Create of a document whose id exists (HTTP 409)."""


class ConcurrencyExhausted(StoreError):
    """A fenced update kept losing etag races while still owning the record."""
