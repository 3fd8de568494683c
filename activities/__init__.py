"""Activity functions: fenced state transitions, order lookup, agent requests, status publishing."""
