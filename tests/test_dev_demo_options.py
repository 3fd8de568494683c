"""``python3 dev.py demo --log-level INFO``, as docs/local-runner.md suggests ("add ``--log-level INFO`` to watch
every state transition go by"): options after ``demo`` are added to the demo's own arguments, the last of an option
given twice winning (``--orders 20``: a shorter demo). Before, every argument replaced the demo's, so that ran
``python -m localrun --log-level INFO``, an error of argparse's that named no command (found walking the docs as a
new user). A command after ``demo`` (``serve ...``, ``simulate ...``) still replaces them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_options_after_demo_are_added_to_the_demos_own(tmp_path: Path) -> None:
    report, chart = tmp_path / "report.json", tmp_path / "chart.svg"
    run = subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "demo", "--orders", "3", "--log-level", "INFO", "--no-progress",
         "--report", str(report), "--chart", str(chart)],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    ran = next(line for line in run.stdout.splitlines() if line.startswith("+ ") and " -m localrun " in line)
    assert " -m localrun simulate --orders 200 --seed 7 --faults examples/profiles/demo.json " in ran, ran
    written = json.loads(report.read_text())
    assert (written["orders"], written["seed"]) == (3, 7)  # the later --orders won; the demo's seed and profile
    assert chart.read_text().lstrip().startswith("<?xml")
    assert re.search(r"^INFO orders: order ord-\d+: \S+ -> Processing", run.stderr, re.M)  # INFO: each transition
    assert "Watch it live" in run.stdout  # a simulation ran: the blurb on how to watch one
