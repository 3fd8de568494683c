"""docs/deploy.md: the sample order is one the app accepts, and the sequence is complete."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from contracts.messages import OrderSubmitted
from contracts.names import EXAMPLE_STATUS_QUEUE, ORDERS_QUEUE
from localrun.ncrontab import Schedule
from localrun.prices import MIN_EXECUTION_S, instance_memory_mb
from tests.infra.app_settings import bicep_app_settings
from tests.infra.function_index import function_index
from tests.infra.paths import ROOT

DOC = (ROOT / "docs" / "deploy.md").read_text()


def test_sample_order_is_a_valid_order_submitted():
    match = re.search(r"^order = (\{.*?^\})$", DOC, flags=re.MULTILINE | re.DOTALL)
    assert match, "no `order = {...}` sample in docs/deploy.md"
    order = OrderSubmitted.model_validate(json.loads(match.group(1)))
    assert order.reply_to == EXAMPLE_STATUS_QUEUE
    assert f'get_queue_sender("{ORDERS_QUEUE}")' in DOC


def test_sequence_has_every_azd_step_in_order():
    sequence = DOC[DOC.index("### The exact sequence") :]
    position = 0
    for step in ["azd auth login", "azd env new", "azd env set AZURE_LOCATION", "azd up", "azd down --purge"]:
        found = sequence.find(step, position)
        assert found != -1, f"{step!r} missing (or out of order) in the deploy sequence"
        position = found


def test_options_and_first_deploy_pitfalls_are_documented():
    for needed in (
        "azd env set VNET_ENABLED true",
        "azd env set DURABLE_BACKEND dts",
        "Premium",  # what the VNet option costs
        "403",  # role assignment propagation on the first deploy
        "preprovision",
        "python-313-changes",
        "supported-languages",
        "durable-task-scheduler-dedicated-sku",
        "Local development with the option on",
        "az provider register --namespace Microsoft.App",  # VNet integration on a fresh subscription
        "PowerShell 7",  # azure.yaml's Windows hooks run under pwsh, which Windows does not ship
    ):
        assert needed in DOC, needed
    assert "Python 3.11" not in DOC


def test_the_first_order_script_sees_the_azd_values_it_reads(tmp_path):
    """The "Send a first order" block, run by bash with an `azd` that prints what `azd env get-values`
    prints (KEY="value" lines, no `export`): its Python script reads the namespace from its environment,
    so the block must export the values, not only set shell variables."""
    section = DOC[DOC.index("### Send a first order") : DOC.index("### Watch it")]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block, "no bash block under Send a first order"
    script = re.sub(
        r"<<'PY'\n.*?\nPY\n",
        "<<'PY'\nimport os\nprint(os.environ['SERVICEBUS_FULLY_QUALIFIED_NAMESPACE'])\nPY\n",
        block.group(1),
        flags=re.DOTALL,
    )
    assert script != block.group(1), "no Python heredoc in the block"
    script = script.replace(".venv/bin/python", sys.executable)
    azd = tmp_path / "azd"
    azd.write_text(
        '#!/bin/sh\n[ "$1 $2" = "env get-values" ] || exit 9\n'
        "printf '%s\\n' 'AZURE_ENV_NAME=\"dev\"'"
        " 'SERVICEBUS_FULLY_QUALIFIED_NAMESPACE=\"sb-x.servicebus.windows.net\"'\n"
    )
    azd.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sb-x.servicebus.windows.net"


def test_the_readme_loads_the_azd_values_the_way_the_deploy_doc_does():
    readme = (ROOT / "README.md").read_text()
    assert 'set -a; eval "$(azd env get-values)"; set +a' in readme
    assert 'set -a; eval "$(azd env get-values)"; set +a' in DOC


def test_the_idle_cost_of_the_timers_is_the_one_the_schedules_make():
    """docs/deploy.md ("Idle is not free"): the timer functions' runs a day and a month, with the Bicep's schedules,
    and the GB-s they are billed at Flex Consumption's 1,000 ms minimum per execution and the Bicep's instance
    memory. Before, the doc said an idle app cost nothing for compute."""
    settings = bicep_app_settings()
    midnight = datetime(2026, 1, 1, tzinfo=UTC)
    runs_a_day = 0
    for function in function_index():
        for binding in function["bindings"]:
            if binding["type"] != "timerTrigger":
                continue
            expression = binding["schedule"]
            if expression.startswith("%"):
                expression = settings[expression.strip("%")]
            schedule = Schedule.parse(expression)
            fire = schedule.next_after(midnight - timedelta(seconds=1))
            while fire < midnight + timedelta(days=1):
                runs_a_day += 1
                fire = schedule.next_after(fire)
    runs_a_month = runs_a_day * 30
    gb_s = runs_a_month * MIN_EXECUTION_S * instance_memory_mb() / 1024
    section = DOC[DOC.index("**Idle is not free.**") :]
    section = section[: section.index("\n\n")]
    for figure in (f"{runs_a_day:,} runs a day", f"{runs_a_month:,} in a 30-day month", f"{gb_s:,.0f} GB-s a month"):
        assert figure in " ".join(section.split()), figure
