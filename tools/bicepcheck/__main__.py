"""``python -m tools.bicepcheck [infra]``: print every finding; exit 1 if there is any.

Runs the syntax and module checks, the explicit rules, and the schema check against the type
library of npm ``@azure/mcp`` (``npm ci`` installs it; ``AZMCP_BINARY`` overrides the path). Without
the library the schema check is reported as not run and the exit code is 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools.bicepcheck.azure_types import TypeLibrary, azmcp_binary
from tools.bicepcheck.checks import check_all_rules, check_schemas, check_tree
from tools.bicepcheck.rules import TYPE_LIBRARY_GAPS

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("infra")
    findings = check_tree(root) + check_all_rules(root)
    binary = azmcp_binary(ROOT)
    if binary is None:
        print("bicepcheck: no azmcp binary (run `npm ci`): schema check NOT run")
        status = 1
    else:
        schema_findings, gaps = check_schemas(root, TypeLibrary(binary))
        findings += schema_findings
        unlisted = sorted(gaps - TYPE_LIBRARY_GAPS)
        if unlisted:
            print(f"bicepcheck: types without a shipped schema, not in rules.TYPE_LIBRARY_GAPS: {unlisted}")
        print(f"bicepcheck: schema check against {binary}; not in the type library: {sorted(gaps)}")
        status = 1 if unlisted else 0
    for finding in findings:
        print(finding)
    print(f"bicepcheck: {len(findings)} finding(s) in {root}")
    return 1 if findings else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
