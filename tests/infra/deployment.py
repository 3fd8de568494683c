"""What a deployment gives the app: the package azd builds (the repository's files that ``.funcignore``
lets through) and the app settings of infra/modules/functionapp.bicep, with a stand-in for each value
Bicep computes at deployment (an endpoint, the identity's client id)."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

from tests.infra.app_settings import bicep_app_settings
from tests.infra.paths import ROOT
from tools.bicepcheck.query import Expression

# .funcignore is read with gitignore rules. The forms it uses: a name or a glob matched against every
# path component (a trailing "/" matches directories only). A pattern of another form (a "/" inside,
# a "!" negation) fails ``funcignore_patterns`` rather than being matched wrongly.
_SIMPLE = re.compile(r"^[^/!]+/?$")

# A stand-in for every value the Bicep computes, by its expression's source.
DEPLOYMENT_VALUES = {
    "identityClientId": "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
    "storageAccount.properties.primaryEndpoints.blob": "https://stexample.blob.core.windows.net/",
    "storageAccount.properties.primaryEndpoints.queue": "https://stexample.queue.core.windows.net/",
    "storageAccount.properties.primaryEndpoints.table": "https://stexample.table.core.windows.net/",
    # a placeholder (the nil UUID as its key) whose ingestion endpoint is a closed local port: nothing is sent
    "applicationInsights.properties.ConnectionString": (
        f"InstrumentationKey={uuid.UUID(int=0)};IngestionEndpoint=https://localhost:9/"
    ),
    "serviceBusNamespaceFqdn": "sb-example.servicebus.windows.net",
    "cosmosEndpoint": "https://cosmos-example.documents.azure.com:443/",
    "cosmosDatabaseName": "orders",
}
_INTERPOLATION = re.compile(r"\$\{([^}]+)\}")


def funcignore_patterns() -> list[str]:
    patterns = [
        line.strip()
        for line in (ROOT / ".funcignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    unsupported = [p for p in patterns if not _SIMPLE.match(p)]
    assert not unsupported, f".funcignore patterns this check cannot read: {unsupported}"
    return patterns


def ignored(relative: Path, patterns: list[str]) -> bool:
    """Whether ``.funcignore`` keeps the file ``relative`` (to the repository) out of the package."""
    parts = relative.parts
    for pattern in patterns:
        name, directories_only = pattern.rstrip("/"), pattern.endswith("/")
        components = parts[:-1] if directories_only else parts
        if any(fnmatch.fnmatchcase(part, name) for part in components):
            return True
    return False


def deployment_package(destination: Path) -> Path:
    """A copy of the repository's tracked files that ``.funcignore`` lets into the package."""
    patterns = funcignore_patterns()
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        relative = Path(name)
        source = ROOT / relative
        if ignored(relative, patterns) or not source.is_file():
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return destination


def _deployed_value(name: str, value: object) -> str:
    if isinstance(value, Expression):
        source = value.source
        if source in DEPLOYMENT_VALUES:
            return DEPLOYMENT_VALUES[source]
        if source.startswith("'") and source.endswith("'"):  # an interpolated string
            return _INTERPOLATION.sub(lambda m: DEPLOYMENT_VALUES[m.group(1)], source[1:-1])
        raise AssertionError(f"app setting {name}: no stand-in for the Bicep expression {source!r}")
    return str(value).lower() if isinstance(value, bool) else str(value)


def azure_app_settings() -> dict[str, str]:
    """The environment a deployed worker gets from the app settings (and what any process needs to
    start: ``PATH``, ``HOME``), and nothing of this machine's."""
    settings = {name: _deployed_value(name, value) for name, value in bicep_app_settings().items()}
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **settings}
