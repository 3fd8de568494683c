"""The console's static files (``operations/console/``), served by the app itself: no CDN, nothing
fetched from elsewhere, so it works offline. Only the files listed here are served."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlsplit

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


PAGE = "index.html"


def console_page(url: str) -> Reply:
    """The console's page at ``.../console``, where its relative links name its files; requested as
    ``.../console/`` (a trailing slash), a 302 there: from that address the browser would ask for
    ``.../console/console/console.js``, which is no file, and show an empty page."""
    path = urlsplit(url).path
    if path.endswith("/"):
        return _moved(path.rstrip("/"))
    return asset(PAGE)


def console_asset(url: str, name: str) -> Reply:
    """The file ``name``; the page itself (``.../console/index.html``) is a 302 to ``.../console``
    (``console_page``)."""
    if name == PAGE:
        return _moved(urlsplit(url).path.rstrip("/").removesuffix(PAGE).rstrip("/"))
    return asset(name)


def _moved(path: str) -> Reply:
    location = quote("/" + path.lstrip("/"), safe="/")  # one leading slash: a path on this app, never a host
    return Reply(302, b"", "text/plain; charset=utf-8", {"Location": location})


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
