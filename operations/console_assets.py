"""The console's static files (``operations/console/``), served by the app itself: no CDN, nothing
fetched from elsewhere, so it works offline. Only the files listed here are served."""

from __future__ import annotations

from pathlib import Path

from operations.web import Reply, error

CONSOLE_DIR = Path(__file__).resolve().parent / "console"
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
# The page loads only its own script and style and talks only to this app.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def asset(name: str) -> Reply:
    content_type = ASSETS.get(name)
    if content_type is None:
        return error(404, f"no console asset {name!r}")
    return Reply(
        200,
        (CONSOLE_DIR / name).read_bytes(),
        content_type,
        {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Frame-Options": "DENY"},
    )
