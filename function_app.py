"""Composition root: checks the app settings, sets up telemetry and registers the blueprints of each role of the
pattern, and nothing else."""

import azure.durable_functions as df

from activities.blueprint import bp as activities
from deferral.blueprint import bp as deferral
from observability.setup import configure_telemetry
from operations.blueprint import bp as operations
from orchestrators.blueprint import bp as orchestrators
from order_agents.blueprint import bp as agents
from retention.blueprint import bp as retention
from settings import Settings
from submission.blueprint import bp as submission
from supervisor.blueprint import bp as supervisor

# The app settings are parsed and checked here, when the host indexes the app: a value the app cannot use
# stops it at start-up with a SettingsError naming the setting, instead of failing the first invocation that reads it.
Settings.from_env()
configure_telemetry()

app = df.DFApp()
for blueprint in (submission, orchestrators, activities, agents, supervisor, deferral, operations, retention):
    app.register_functions(blueprint)
