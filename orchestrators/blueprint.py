"""Function registrations of this role (thin triggers calling plain code)."""

import azure.durable_functions as df

bp = df.Blueprint()
