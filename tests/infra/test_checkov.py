"""checkov over infra/: every file parsed, no failed check, every skip justified and in use.

checkov exits 0 even when it could not parse a file, so the JSON summary is what is checked.
It scans only the Bicep in this repo: registry (AVM) modules are not downloaded or scanned.
"""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from typing import Any

from tests.infra.paths import INFRA, ROOT, checkov_executable

SKIP_COMMENT = re.compile(r"//\s*checkov:skip=(?P<check>CKV2?_[A-Z]+_\d+)(?::(?P<reason>.*))?")


@cache
def checkov_report() -> dict[str, Any]:
    result = subprocess.run(
        [str(checkov_executable()), "-d", str(INFRA), "--framework", "bicep", "--skip-download", "-o", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.stdout.strip(), f"checkov printed no report (exit {result.returncode}): {result.stderr[-2000:]}"
    report = json.loads(result.stdout)
    # One framework gives an object; several would give a list.
    single: dict[str, Any] = report[0] if isinstance(report, list) else report
    return single


def skip_comments() -> list[tuple[str, int, str, str]]:
    """(file relative to infra/, line, check id, reason) of every skip comment."""
    found = []
    for path in sorted(INFRA.rglob("*.bicep")):
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            match = SKIP_COMMENT.search(text)
            if match:
                found.append((f"/{path.relative_to(INFRA)}", number, match["check"], (match["reason"] or "").strip()))
    return found


def test_checkov_parses_every_file():
    summary = checkov_report()["summary"]
    assert summary["parsing_errors"] == 0, summary
    assert summary["resource_count"] >= 30, summary


def test_checkov_finds_no_failed_check():
    report = checkov_report()
    failed = [
        f"{c['check_id']} {c['resource']} {c['file_path']}:{c['file_line_range']} {c['check_name']}"
        for c in report["results"].get("failed_checks", [])
    ]
    assert report["summary"]["failed"] == 0
    assert failed == []


def test_checkov_actually_checked_resources():
    assert checkov_report()["summary"]["passed"] >= 10


def test_every_skip_has_a_reason():
    skips = skip_comments()
    assert skips, "no skip comments found: the parser of this test is broken"
    missing = [f"{file}:{line} {check}" for file, line, check, reason in skips if len(reason) < 20]
    assert missing == [], "skips need a reason after the check id: //checkov:skip=CKV_X:reason"


def test_every_skip_is_applied_to_the_resource_it_sits_in():
    """A skip comment inside a resource applies to that resource only; one checkov does not
    report as skipped is misplaced, or names a check that does not exist for that resource."""
    skipped = {
        (c["file_path"], c["check_id"], c["file_line_range"][0], c["file_line_range"][1])
        for c in checkov_report()["results"].get("skipped_checks", [])
    }
    unused = [
        f"{file}:{line} {check}"
        for file, line, check, _ in skip_comments()
        if not any(f == file and c == check and start <= line <= end for f, c, start, end in skipped)
    ]
    assert unused == []
