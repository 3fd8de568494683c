"""The pure domain of the pattern: state records, legal moves, the workflow table, deadlines and
retry arithmetic. No Azure imports here; adapters and triggers call into this package."""
