"""Durable history retention: finished orchestration instances purged from the Durable backend after
``DURABLE_HISTORY_RETENTION_DAYS``."""
