"""Headless Chromium for the console's browser test and its screenshot: Debian's ``chromium``
package (``python3 dev.py setup`` installs it when missing and apt-get is there), driven by
Playwright from PyPI with that executable. No browser is downloaded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MISSING = (
    "Chromium is needed for the console's browser test and was not found. Install it: Debian/Ubuntu "
    "`sudo apt-get install chromium` (python3 dev.py setup does this when run as root), Fedora "
    "`sudo dnf install chromium`, macOS `brew install --cask chromium`; or point SAS_CHROMIUM at a "
    "Chromium or Chrome executable."
)


def chromium_path() -> str | None:
    """``SAS_CHROMIUM``, else a Chromium on the usual paths, else None."""
    named = os.environ.get("SAS_CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    for candidate in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = candidate if Path(candidate).is_absolute() and Path(candidate).exists() else shutil.which(candidate)
        if found:
            return found
    return None
