"""The scheduler (one Durable orchestration per attempt) and the starter that claims Pending records."""
