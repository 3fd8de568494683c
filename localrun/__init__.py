"""The local runner: the whole app with no Azure and no Core Tools (``python -m localrun``)."""
