"""The remote services the agents call (inventory, payment, shipping): the interface
(``interface.py``), the HTTP client for a real endpoint, the built-in simulators, and the choice
between them per service (``services.py``)."""
