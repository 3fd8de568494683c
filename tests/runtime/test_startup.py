"""Start-up conformance: the app loads in the real Functions Python runtime (``azure-functions-runtime``,
the worker's engine on Python 3.13+, pinned in requirements.txt) with the checks it makes when
``func start`` or Azure loads ``function_app.py``. One rejected function fails indexing of the whole
app, so these tests index in fresh interpreters, as a worker process starts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest

from tests.infra.function_index import function_index
from tests.infra.paths import ROOT
from tests.runtime.index_with_runtime import index_with_runtime


def test_the_runtime_indexes_every_function_the_app_registers() -> None:
    result = index_with_runtime(ROOT)
    assert "error" not in result, result.get("error")
    registered = {f["name"] for f in function_index()}  # the SDK's own list, from another interpreter
    assert len(registered) > 20
    assert set(result["functions"]) == registered


def test_a_signature_the_worker_refuses_fails_indexing_of_the_whole_app(tmp_path: Path) -> None:
    """The control for the test above: the same indexer rejects the annotation the app once had."""
    (tmp_path / "function_app.py").write_text(
        textwrap.dedent(
            """
            from typing import Any
            import azure.durable_functions as df

            app = df.DFApp()

            @app.activity_trigger(input_name="data")
            def fine(data: Any) -> None:
                return None

            @app.activity_trigger(input_name="data")
            def refused(data: dict[str, Any]) -> None:
                return None
            """
        )
    )
    result = index_with_runtime(tmp_path)
    assert "functions" not in result
    assert "FunctionLoadError" in result["error"]
    assert "invalid non-type annotation" in result["error"]


def test_function_app_loads_in_a_clean_venv_built_only_from_requirements_txt(tmp_path: Path) -> None:
    """What Azure installs is requirements.txt and nothing else: no test or dev packages. The host's
    protobuf messages are the host's (Azure's proxy worker injects them), so they are copied in."""
    if sys.version_info[:2] != (3, 13):
        pytest.fail("the app runs on Python 3.13: run the tests from the .venv that dev.py builds")
    clean = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(clean)
    python = str(clean / "bin" / "python")
    install = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            str(ROOT / "requirements.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    protos = Path(sysconfig.get_paths()["purelib"]) / "functions_host_protos"
    shutil.copytree(protos, Path(site) / "functions_host_protos")
    pytest_absent = subprocess.run([python, "-c", "import pytest"], capture_output=True, check=False)
    assert pytest_absent.returncode != 0, "the clean venv must hold only what requirements.txt installs"

    result = index_with_runtime(ROOT, python)
    assert "error" not in result, result.get("error")
    assert set(result["functions"]) == {f["name"] for f in function_index()}
