"""``python -m tools.bicepcheck [infra]``: print every finding; exit 1 if there is any."""

from __future__ import annotations

import sys
from pathlib import Path

from tools.bicepcheck.checks import check_tree


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("infra")
    findings = check_tree(root)
    for finding in findings:
        print(finding)
    print(f"bicepcheck: {len(findings)} finding(s) in {root}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
