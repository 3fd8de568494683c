#!/bin/sh
# azd postprovision hook: merges into local.settings.json what `func start` needs against the
# provisioned resources (Service Bus and Cosmos DB in Azure, reached with your `az login` identity,
# which infra/modules/rbac.bicep granted the same data roles as the app). The Functions host's own
# storage (timers, Durable task hub) stays on Azurite, so a local run never competes with the
# deployed app for Durable work items. Run it again any time: `azd hooks run postprovision`.
#
# Merge, not overwrite. The hook changes only these keys under "Values"; everything else in the
# file (your other settings, "Host", "ConnectionStrings", ...) is kept as it is:
#   owned    - always set from the azd environment; on a conflict the provisioned value wins:
#              ServiceBusConnection__fullyQualifiedNamespace, COSMOS_ENDPOINT, COSMOS_DATABASE,
#              COSMOS_VERIFY_TLS (true: Azure has real certificates).
#   removed  - ServiceBusConnection and COSMOS_KEY: an emulator connection string or key would take
#              precedence over the identity-based connection (or fail against Entra-only Cosmos DB).
#   defaults - added only when missing; on a conflict YOUR value wins: FUNCTIONS_WORKER_RUNTIME,
#              AzureWebJobsStorage (Azurite), APPLICATIONINSIGHTS_CONNECTION_STRING (empty: no export
#              from a developer machine), the telemetry switches, the timer schedules
#              STARTER_SCHEDULE / SUPERVISOR_SCHEDULE / PEEK_SWEEP_SCHEDULE (the host refuses a timer
#              whose %NAME% does not resolve) and every other tuning setting at its settings.py default.
# Before changing the file the hook copies it to local.settings.json.<UTC time>.bak; a run that
# changes nothing writes nothing. A file that is not valid JSON, or is encrypted, is left untouched
# and the hook fails with the reason. Needs only sh, azd and python3 (for the JSON merge; no jq).
# scripts/postprovision.ps1 is the Windows twin: same keys, same rules.
#
# Operators' sign-in: when the preprovision hook manages the app registration (OPS_AUTH_CREATE_APP=true
# and OPS_AUTH_CLIENT_ID set), this hook adds the redirect URI https://<host>/.auth/login/aad/callback,
# <host> taken from the OPS_CONSOLE_URL output, to the registration's web redirect URIs (kept, not
# replaced). A registration you made yourself is not touched: the hook prints the URI to add. Without
# az, or signed out, it warns and goes on (sign-in then fails until the URI is added).
set -eu

cd "$(dirname "$0")/.."

# `azd env get-values` prints KEY="value" lines; read only the keys used below.
values=$(azd env get-values)
get() {
  printf '%s\n' "$values" | sed -n "s/^$1=\"\\(.*\\)\"\$/\\1/p" | head -n 1
}

sb_namespace=$(get SERVICEBUS_FULLY_QUALIFIED_NAMESPACE)
cosmos_endpoint=$(get COSMOS_ENDPOINT)
cosmos_database=$(get COSMOS_DATABASE)

if [ -z "$sb_namespace" ] || [ -z "$cosmos_endpoint" ] || [ -z "$cosmos_database" ]; then
  echo "postprovision: SERVICEBUS_FULLY_QUALIFIED_NAMESPACE, COSMOS_ENDPOINT or COSMOS_DATABASE is missing from the azd environment; run 'azd provision' first." >&2
  exit 1
fi

# Adds the sign-in redirect URI to the operators' app registration (see the header). Never fails the hook.
ops_redirect_uri() {
  client_id=$(get OPS_AUTH_CLIENT_ID)
  [ -n "$client_id" ] || return 0
  host=$(get OPS_CONSOLE_URL | sed -n 's#^https://\([^/]*\)/.*#\1#p')
  if [ -z "$host" ]; then
    echo "postprovision: warning: OPS_CONSOLE_URL is missing from the azd environment: the sign-in redirect URI was not added." >&2
    return 0
  fi
  uri="https://$host/.auth/login/aad/callback"
  if [ "$(get OPS_AUTH_CREATE_APP)" != "true" ]; then
    echo "postprovision: the app registration $client_id is yours (OPS_AUTH_CREATE_APP is not 'true'): sign-in needs its web redirect URI $uri (docs/deploy.md)."
    return 0
  fi
  if ! command -v az >/dev/null 2>&1; then
    echo "postprovision: warning: az (Azure CLI) not found: add the redirect URI yourself: az ad app update --id $client_id --web-redirect-uris $uri" >&2
    return 0
  fi
  if ! existing=$(az ad app show --id "$client_id" --query "web.redirectUris" -o tsv); then
    echo "postprovision: warning: could not read the app registration $client_id (run 'az login', then 'azd hooks run postprovision'): redirect URI $uri not added." >&2
    return 0
  fi
  if printf '%s\n' "$existing" | grep -qxF "$uri"; then
    echo "postprovision: the app registration $client_id already has the redirect URI $uri"
    return 0
  fi
  set -f
  # shellcheck disable=SC2086 # one URI a line, URIs have no spaces: keep the existing ones, add ours
  set -- $existing "$uri"
  set +f
  if ! az ad app update --id "$client_id" --web-redirect-uris "$@"; then
    echo "postprovision: warning: could not add the redirect URI $uri to $client_id (az ad app update --id $client_id --web-redirect-uris ...)." >&2
    return 0
  fi
  echo "postprovision: added the redirect URI $uri to the app registration $client_id"
}
ops_redirect_uri

if ! command -v python3 >/dev/null 2>&1; then
  echo "postprovision: python3 is needed to merge local.settings.json (the app itself needs Python 3.13); install it and run 'azd hooks run postprovision'." >&2
  exit 1
fi

PP_SB_NAMESPACE="$sb_namespace" PP_COSMOS_ENDPOINT="$cosmos_endpoint" PP_COSMOS_DATABASE="$cosmos_database" \
  python3 - <<'PY'
import datetime
import json
import os
import shutil
import sys
import tempfile

PATH = "local.settings.json"

# owned: always set from the azd environment (the provisioned value wins).
OWNED = {
    "ServiceBusConnection__fullyQualifiedNamespace": os.environ["PP_SB_NAMESPACE"],
    "COSMOS_ENDPOINT": os.environ["PP_COSMOS_ENDPOINT"],
    "COSMOS_DATABASE": os.environ["PP_COSMOS_DATABASE"],
    "COSMOS_VERIFY_TLS": "true",
}
# removed: emulator credentials that would override the identity-based connections.
REMOVED = ["ServiceBusConnection", "COSMOS_KEY"]
# defaults: added only when missing (your value wins).
DEFAULTS = {
    "FUNCTIONS_WORKER_RUNTIME": "python",
    "AzureWebJobsStorage": "UseDevelopmentStorage=true",
    "APPLICATIONINSIGHTS_CONNECTION_STRING": "",
    "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY": "false",
    "PYTHON_ENABLE_OPENTELEMETRY": "true",
    "PYTHON_THREADPOOL_THREAD_COUNT": "104",
    "MAX_PENDING": "1000",
    "MAX_IN_FLIGHT": "200",
    "STATE_COUNT_CACHE_SECONDS": "5",
    "START_GRACE_SECONDS": "60",
    "STARTER_BATCH_SIZE": "50",
    "STARTER_SCHEDULE": "*/20 * * * * *",
    "STEP_TIMEOUT_SECONDS": "60",
    "AGENT_MAX_ATTEMPTS": "4",
    "AGENT_RETRY_BASE_MS": "500",
    "AGENT_RETRY_MAX_MS": "8000",
    "INVENTORY_SERVICE_URL": "",
    "PAYMENT_SERVICE_URL": "",
    "SHIPPING_SERVICE_URL": "",
    "PAYMENT_BACKUP_SERVICE_URL": "",
    "REVIEW_AMOUNT_THRESHOLD_CENTS": "100000",
    "REVIEW_TIMEOUT_SECONDS": "86400",
    "REVIEW_DEFAULT_ACTION": "compensate",
    "SUPERVISOR_SCHEDULE": "*/30 * * * * *",
    "MAX_FAILURES": "3",
    "RETRY_BACKOFF_BASE_SECONDS": "10",
    "RETRY_BACKOFF_MAX_SECONDS": "300",
    "SUPERVISOR_BACKEND_WAIT_SECONDS": "600",
    "SUPERVISOR_MAX_RECORDS": "100",
    "SUPERVISOR_PAGE_SIZE": "25",
    "SUPERVISOR_WINDOW_MINUTES": "60",
    "SUPERVISOR_CATCHUP_EVERY": "10",
    "CIRCUIT_FAILURE_THRESHOLD": "8",
    "CIRCUIT_COOLDOWN_SECONDS": "30",
    "CIRCUIT_COOLDOWN_MAX_SECONDS": "240",
    "CIRCUIT_PROBES": "1",
    "CIRCUIT_HEALTH_CACHE_SECONDS": "5",
    "MAX_OUTAGE_WAIT_MINUTES": "60",
    "OUTAGE_SETTLE_SECONDS": "300",
    "PAYMENT_WAIT_MINUTES": "60",
    "DEFER_RETRY_DELAY_SECONDS": "30",
    "DEFER_MAX_ROUNDS": "3",
    "PEEK_SWEEP_SCHEDULE": "0 */5 * * * *",
    "PEEK_SWEEP_AGE_MINUTES": "10",
    "PEEK_SWEEP_MAX_MESSAGES": "500",
    "ORDERLESS_PAYMENT_ALERT_MINUTES": "120",
    "DURABLE_HISTORY_RETENTION_DAYS": "30",
}


def fail(reason):
    print(f"postprovision: {reason}; local.settings.json was not changed.", file=sys.stderr)
    sys.exit(2)


previous = None
if os.path.exists(PATH):
    with open(PATH, "rb") as f:
        previous = f.read()
    try:
        document = json.loads(previous.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        fail(f"the existing local.settings.json is not valid JSON ({error}); fix it or move it away and run 'azd hooks run postprovision' again")
    if not isinstance(document, dict) or not isinstance(document.get("Values", {}), dict):
        fail('the existing local.settings.json is not an object with a "Values" object')
    if document.get("IsEncrypted") is True:
        fail("the existing local.settings.json is encrypted (IsEncrypted: true); run 'func settings decrypt' first")
else:
    document = {"IsEncrypted": False}

values = document.setdefault("Values", {})
document.setdefault("IsEncrypted", False)
replaced, added, removed, kept = [], [], [], []
for key in REMOVED:
    if key in values:
        del values[key]
        removed.append(key)
for key, value in OWNED.items():
    if key not in values:
        added.append(key)
    elif values[key] != value:
        replaced.append(key)
    values[key] = value
for key, value in DEFAULTS.items():
    if key not in values:
        values[key] = value
        added.append(key)
    elif values[key] != value:
        kept.append(key)

text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
if previous is not None and previous.decode("utf-8-sig") == text:
    print("postprovision: local.settings.json is already up to date")
    sys.exit(0)

if previous is not None:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    backup, n = f"{PATH}.{stamp}.bak", 1
    while os.path.exists(backup):
        backup, n = f"{PATH}.{stamp}-{n}.bak", n + 1
    shutil.copy2(PATH, backup)
    print(f"postprovision: saved the previous local.settings.json as {backup}")

# Write to a temporary file beside it, then rename: an interrupted run leaves the old file whole.
handle, temporary = tempfile.mkstemp(prefix=".local.settings.", suffix=".json", dir=".")
with os.fdopen(handle, "w", encoding="utf-8") as f:
    f.write(text)
if previous is not None:
    shutil.copymode(PATH, temporary)
os.replace(temporary, PATH)

print(
    "postprovision: merged local.settings.json (Service Bus {}, Cosmos DB {})".format(
        OWNED["ServiceBusConnection__fullyQualifiedNamespace"], OWNED["COSMOS_ENDPOINT"]
    )
)
for label, keys in (
    ("set from azd, replacing your value", replaced),
    ("removed (emulator credentials; the old values are in the backup)", removed),
    ("kept your value instead of the default", kept),
):
    if keys:
        print(f"postprovision:   {label}: {', '.join(keys)}")
if added:
    print(f"postprovision:   added {len(added)} settings")
PY
