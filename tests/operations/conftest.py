"""Fixtures the ops API tests share: a harness with a local operator principal (``ops``) and one as on
App Service with authentication on (``easy_auth``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.operations.harness import OPERATOR, OpsHarness


@pytest.fixture
def ops(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    yield made
    made.close()


@pytest.fixture
def easy_auth(cosmos_db: Any) -> Iterator[OpsHarness]:
    """As on App Service with authentication on: the platform sets WEBSITE_AUTH_ENABLED."""
    made = OpsHarness(cosmos_db, WEBSITE_AUTH_ENABLED="True", WEBSITE_SITE_NAME="orders-app")
    yield made
    made.close()
