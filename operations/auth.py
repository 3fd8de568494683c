"""Who is asking, and may they: App Service authentication (Easy Auth) with Microsoft Entra ID.

When authentication is enabled on the app, the platform validates the caller's session or token and
passes the principal to the app in the ``X-MS-CLIENT-PRINCIPAL`` header (base64 JSON: ``auth_typ``,
``claims`` [{``typ``, ``val``}], ``name_typ``, ``role_typ``); it strips that header from every
incoming request, so only the platform can set it
(https://learn.microsoft.com/azure/app-service/configure-authentication-user-identities). Only then is
the header worth anything: the platform tells the app that authentication is on with the variable
``WEBSITE_AUTH_ENABLED=True`` (https://learn.microsoft.com/azure/app-service/reference-app-settings).
Without it, every request is refused, whatever headers it carries.

For local development a principal can be configured explicitly with the local-only setting
``OPS_LOCAL_PRINCIPAL`` (``name:Role1,Role2``). It is never used on App Service (``WEBSITE_SITE_NAME``
set) or when platform authentication is on; and it is empty by default, so nothing is open unless a
developer says so. No request header says who acts in that mode; only ``Host`` is read, and a request
addressed to anything but this machine's loopback names is refused (403): ``func start`` listens on
every interface, and a web page whose DNS name is rebound to 127.0.0.1 sends its own name (DNS
rebinding), which a browser cannot forge.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from domain.text import blank, carriable, one_line
from settings import Settings

READ_ROLE = "Orders.Read"
OPERATE_ROLE = "Orders.Operate"
ROLES = (READ_ROLE, OPERATE_ROLE)
PRINCIPAL_HEADER = "x-ms-client-principal"
# The provider that defines and assigns the app roles (infra/ops-app-roles.json), as the principal names it
# (``auth_typ``). App Service may run other providers beside it (Google, GitHub, any OpenID Connect one), whose
# principals come in the same header: their ``roles`` claims are theirs to shape, and grant nothing here.
ROLES_PROVIDER = "aad"
# The claim types Entra ID uses when the principal does not name its own (role_typ, name_typ).
ROLE_CLAIM = "roles"
NAME_CLAIMS = ("name", "preferred_username", "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name")
# An application signed in with its own credentials (client credentials: the app roles are assignable to
# applications, infra/ops-app-roles.json) has no name claim: it is named by its client id, ``appid`` in
# v1 tokens, ``azp`` in v2. Only a token with no delegated scope is the application's own: in a user's
# token (``scp``, or its mapped type) ``azp`` is the client the user signed in with, not who acts.
APP_ID_CLAIMS = ("appid", "azp")
SCOPE_CLAIMS = ("scp", "http://schemas.microsoft.com/identity/claims/scope")
# The principal's object id, which Entra ID never reuses, unlike a display name (``oid``, or its mapped type):
# the logs tell operators apart by it (``OperatorRequest``), two people of one name, or a person whose
# display name reads ``app <client id>``.
OBJECT_ID_CLAIMS = ("oid", "http://schemas.microsoft.com/identity/claims/objectidentifier")
# A sign-in's claims as the platform passes them: an Entra ID token lists up to 200 groups when the registration
# emits the groups claim, about 20 KiB of base64 with the rest; the cap only bounds what the app decodes.
MAX_PRINCIPAL_HEADER = 64 * 1024
# An operator's name goes on the record (``history[].by``, a cancel's ``lastError``), into alerts and
# log lines: at most this many characters of it.
MAX_OPERATOR_NAME = 128


def operator_name(claim: str) -> str:
    """A name claim as the record and the logs can carry it: on one line, no control or bidirectional
    formatting character, no lone surrogate (``domain.text.carriable``), at most ``MAX_OPERATOR_NAME``
    characters (cut with an ellipsis); empty when nothing visible is left. The platform vouches for the
    principal, not for what its display name holds, so the name is cleaned, never a reason to refuse."""
    name = one_line(carriable(one_line(claim)))
    if blank(name):
        return ""
    return name if len(name) <= MAX_OPERATOR_NAME else cut(name, MAX_OPERATOR_NAME - 1) + "\u2026"


def cut(text: str, limit: int) -> str:
    """``text``'s first ``limit`` code points, without a broken end: no trailing joiner (U+200D) or space,
    and not half a flag (a flag is a pair of regional indicators)."""
    kept = text[:limit].rstrip().rstrip("\u200d").rstrip()
    indicators = len(kept) - len(kept.rstrip(_REGIONAL_INDICATORS))
    return kept[:-1].rstrip() if indicators % 2 else kept


_REGIONAL_INDICATORS = "".join(chr(c) for c in range(0x1F1E6, 0x1F200))


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[str]
    source: str  # "easyauth" or "local"
    object_id: str = ""  # the oid claim (easyauth); empty when the principal has none, and locally


@dataclass(frozen=True)
class Refusal:
    status: int  # 401, 403 or 503
    message: str


def platform_auth_enabled(settings: Settings) -> bool:
    return settings.website_auth_enabled


def local_principal(settings: Settings) -> Principal | None:
    """The developer principal of ``OPS_LOCAL_PRINCIPAL``, or None (unset, or not a local run)."""
    text = settings.ops_local_principal.strip()
    if not text or settings.website_site_name.strip() or platform_auth_enabled(settings):
        return None
    claim, _, roles = text.partition(":")
    name = operator_name(claim)
    if not name:
        return None
    granted = frozenset(r.strip() for r in roles.split(",") if r.strip() in ROLES)
    return Principal(name, granted, "local")


def decode_principal(header: str) -> Principal | None:
    """The principal in an ``X-MS-CLIENT-PRINCIPAL`` header, or None when it is not one: every field
    is checked for its JSON type before use (``name_typ`` and ``role_typ`` strings when present,
    ``claims`` a list of objects), and JSON the parser cannot take (nested past the recursion limit,
    integers past the digit limit, not UTF-8) is not one either. The name is the first name claim with
    something visible in it, cleaned (``operator_name``); a principal with none is an application's
    own (no delegated scope) named ``app <client id>`` (``application_name``), or not one. Its app roles are
    its role claims when Entra ID signed it in (``ROLES_PROVIDER``), else none."""
    if not header or len(header) > MAX_PRINCIPAL_HEADER:
        return None
    try:
        data: Any = json.loads(base64.b64decode(header, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        return None
    role_type = data.get("role_typ") or ROLE_CLAIM
    name_type = data.get("name_typ")
    if not isinstance(role_type, str) or not isinstance(name_type, str | None):
        return None
    entra = data.get("auth_typ") == ROLES_PROVIDER
    roles: set[str] = set()
    names: dict[str, str] = {}
    for claim in data["claims"]:
        if not isinstance(claim, dict) or not isinstance(claim.get("val"), str):
            continue
        kind = claim.get("typ")
        if kind in (role_type, ROLE_CLAIM):
            if entra:
                roles.add(claim["val"])
        elif isinstance(kind, str):
            names.setdefault(kind, claim["val"])
    name = next(
        (operator_name(names[t]) for t in (name_type, *NAME_CLAIMS) if t in names and operator_name(names[t])), ""
    )
    name = name or application_name(names)
    if not name:
        return None
    object_id = next((operator_name(names[t]) for t in OBJECT_ID_CLAIMS if t in names), "")
    return Principal(name, frozenset(roles), "easyauth", object_id)


def application_name(claims: dict[str, str]) -> str:
    """``app <client id>`` for the claims of an application's own token (a client id, no delegated
    scope), else empty."""
    if any(t in claims for t in SCOPE_CLAIMS):
        return ""
    client_id = next((operator_name(claims[t]) for t in APP_ID_CLAIMS if t in claims and operator_name(claims[t])), "")
    return operator_name(f"app {client_id}") if client_id else ""


# The names a request to this machine's loopback interface is addressed to (``Host``, any port).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


def loopback_host(host: str) -> bool:
    """Whether a ``Host`` header (``name[:port]``, ``[v6]:port``) names this machine's loopback interface."""
    name = host.strip().lower()
    name = name[: name.find("]") + 1] if name.startswith("[") else name.partition(":")[0]
    return name in LOOPBACK_HOSTS


def authenticate(settings: Settings, headers: Any) -> Principal | Refusal:
    """The caller, or why not: 503 when the app cannot know (platform authentication is off and no
    local principal is configured), 401 when there is no principal; 403 for a request to the local
    principal addressed to another host than this machine's loopback (see the module)."""
    local = local_principal(settings)
    if local is not None:
        host = str(headers.get("host") or "")
        if host and not loopback_host(host):
            return Refusal(
                403,
                f"the local operator principal answers requests to localhost, 127.0.0.1 or [::1] only, not "
                f"Host {host[:100]!r}",
            )
        return local
    if not platform_auth_enabled(settings):
        return Refusal(
            503,
            "App Service authentication is not enabled on this app: every operator request is refused "
            '(see docs/deploy.md, "Operators: sign-in, app roles, the console and the workbook")',
        )
    header = str(headers.get(PRINCIPAL_HEADER) or "")
    if not header:
        return Refusal(401, "sign in first: no authenticated principal")
    principal = decode_principal(header)
    if principal is None:  # signed in again, the platform would pass the same: say why, never send it to sign in
        return Refusal(
            401,
            "signed in, but the principal App Service passed names nobody the app can record: no name claim (a "
            f"user's), no client id (an application's own token), or over {MAX_PRINCIPAL_HEADER // 1024} KiB",
        )
    return principal


def authorize(settings: Settings, headers: Any, role: str) -> Principal | Refusal:
    """``authenticate``, then the app role ``role`` (403 without it)."""
    found = authenticate(settings, headers)
    if isinstance(found, Refusal):
        return found
    if role not in found.roles:
        return Refusal(403, f"{found.name} lacks the app role {role}")
    return found
