"""Cosmos DB: the order database (container ``orders``) and the state store (container ``state``)."""
