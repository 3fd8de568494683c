"""Out-of-order and temporarily unprocessable messages on the ``orders`` queue: Service Bus deferral,
the documents that track deferred sequence numbers, their recovery, and the peek sweep."""
