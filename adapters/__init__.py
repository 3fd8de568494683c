"""Thin adapters between the domain and Azure: Cosmos DB, Service Bus, the clock."""
