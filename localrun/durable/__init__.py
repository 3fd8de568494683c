"""Host-side Durable Functions engine for the local runner: keeps each instance's history and drives
orchestrators through the SDK's own replay, as the Functions host does."""
