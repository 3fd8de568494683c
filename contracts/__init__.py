"""Message contracts (JSON bodies with ``type`` and ``schemaVersion``) and the names of queues
and containers the app uses."""
