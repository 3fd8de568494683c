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

from tests.infra.deployment import azure_app_settings, deployment_package
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


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv holding what Azure installs: requirements.txt and nothing else (no test or dev packages).
    The host's protobuf messages are the host's (Azure's proxy worker injects them), so they are copied in."""
    if sys.version_info[:2] != (3, 13):
        pytest.fail("the app runs on Python 3.13: run the tests from the .venv that dev.py builds")
    clean = tmp_path_factory.mktemp("clean") / "venv"
    # no pip of its own (ensurepip costs about 3 s of CPU): this venv's pip installs into it (``--python``)
    venv.EnvBuilder(with_pip=False).create(clean)
    python = str(clean / "bin" / "python")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
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
    return python


def test_function_app_loads_in_a_clean_venv_built_only_from_requirements_txt(clean_python: str) -> None:
    result = index_with_runtime(ROOT, clean_python)
    assert "error" not in result, result.get("error")
    assert set(result["functions"]) == {f["name"] for f in function_index()}


def test_the_deployed_package_indexes_alone_with_the_app_settings_azure_gives_it(
    clean_python: str, tmp_path: Path
) -> None:
    """What Azure runs: the files .funcignore lets into the package, nothing else importable (no
    localrun, tools or tests), in a process whose environment is the app settings of
    infra/modules/functionapp.bicep (``azure_app_settings``), with the clean venv's packages."""
    package = deployment_package(tmp_path / "package")
    assert (package / "function_app.py").is_file()
    assert not (package / "localrun").exists() and not (package / "tests").exists()
    result = index_with_runtime(package, clean_python, env=azure_app_settings(), isolated=True)
    assert "error" not in result, result.get("error")
    assert set(result["functions"]) == {f["name"] for f in function_index()}


def test_the_package_check_sees_an_import_of_local_only_code(clean_python: str, tmp_path: Path) -> None:
    """The control for the test above: a function app that imports the local runner fails there,
    though it would load with the repository's files beside it."""
    package = deployment_package(tmp_path / "package")
    app = package / "function_app.py"
    app.write_text("import localrun  # noqa\n" + app.read_text())
    result = index_with_runtime(package, clean_python, env=azure_app_settings(), isolated=True)
    assert "functions" not in result
    assert "localrun" in result["error"]
