"""The Durable Functions extension's HTTP API, the part the Python durable client
(``azure.durable_functions.DurableOrchestrationClient``) calls, answered from the local runner's
``DurableEngine``: the URLs the host hands the client binding (``urls``), the status payload and
history the status query returns (``status``), and the routing and answers (``handlers``). The
loopback server that carries them is ``localrun.durable.http_api``.

Sources: the HTTP API reference
(https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-http-api) and the
extension's own handler, ``HttpApiHandler.cs`` in Azure/azure-functions-durable-extension, which the
status codes, bodies and headers here follow where the reference is silent.
"""
