"""Developer tools that are not part of the function app (excluded from the deployment package)."""
