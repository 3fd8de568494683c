"""Messages to people: operator alerts and submitters' status updates."""
