#!/bin/sh
# azd preprovision hook: fail early, with a clear message, when the chosen options or region cannot
# work, instead of an ARM error minutes into `azd provision`:
# - DURABLE_BACKEND is storage or dts, VNET_ENABLED is true or false;
# - the region offers Flex Consumption with the app's Python version (asked from Azure with
#   `az functionapp list-flexconsumption-locations`; skipped with a warning when az is missing or
#   not signed in, the Bicep @allowed list of regions still applies).
set -eu

PYTHON_VERSION=3.13   # infra/modules/functionapp.bicep functionAppConfig.runtime.version

location=${AZURE_LOCATION:-}
backend=${DURABLE_BACKEND:-storage}
vnet=${VNET_ENABLED:-false}

case "$backend" in
  storage|dts) ;;
  *) echo "preprovision: DURABLE_BACKEND must be 'storage' or 'dts', not '$backend' (azd env set DURABLE_BACKEND storage)." >&2; exit 1 ;;
esac
case "$vnet" in
  true|false) ;;
  *) echo "preprovision: VNET_ENABLED must be 'true' or 'false', not '$vnet'." >&2; exit 1 ;;
esac
if [ -z "$location" ]; then
  echo "preprovision: AZURE_LOCATION is not set: azd env set AZURE_LOCATION <region> (a Flex Consumption region, e.g. swedencentral)." >&2
  exit 1
fi
if [ "$vnet" = "true" ]; then
  echo "preprovision: VNET_ENABLED=true: Service Bus becomes Premium (1 messaging unit, billed per hour whether used or not; see docs/deploy.md)."
fi

if ! command -v az >/dev/null 2>&1; then
  echo "preprovision: warning: az (Azure CLI) not found: cannot check that $location offers Flex Consumption with Python $PYTHON_VERSION." >&2
  exit 0
fi
if ! regions=$(az functionapp list-flexconsumption-locations --runtime python --runtime-version "$PYTHON_VERSION" --query "[].name" -o tsv 2>/dev/null); then
  echo "preprovision: warning: 'az functionapp list-flexconsumption-locations' failed (run 'az login'): region $location not checked." >&2
  exit 0
fi
wanted=$(printf '%s' "$location" | tr 'A-Z' 'a-z' | tr -d ' ')
if printf '%s\n' "$regions" | tr 'A-Z' 'a-z' | tr -d ' ' | grep -qx "$wanted"; then
  echo "preprovision: $location offers Flex Consumption with Python $PYTHON_VERSION."
  exit 0
fi
echo "preprovision: $location does not offer Flex Consumption with Python $PYTHON_VERSION. Regions that do:" >&2
printf '%s\n' "$regions" | sed 's/^/  /' >&2
echo "Choose one: azd env set AZURE_LOCATION <region>" >&2
exit 1
