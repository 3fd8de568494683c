"""The local runner: the whole app with no Azure and no Core Tools (``python -m localrun``)."""

import os

# gRPC's core logs its connection shutdowns at INFO ("Got goaway") when the runner's settlement
# server stops; a user's own GRPC_VERBOSITY wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
