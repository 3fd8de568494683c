#!/bin/sh
# azd preprovision hook: fail early, with a clear message, when the chosen options or region cannot
# work, instead of an ARM error minutes into `azd provision`:
# - DURABLE_BACKEND is storage or dts, VNET_ENABLED is true or false;
# - the region offers Flex Consumption with the app's Python version (asked from Azure with
#   `az functionapp list-flexconsumption-locations`; skipped with a warning when az is missing or
#   not signed in, the Bicep @allowed list of regions still applies);
# - DURABLE_BACKEND=dts: the region offers the Durable Task Scheduler (asked from Azure: the
#   Microsoft.DurableTask provider's locations for schedulers, the query of Microsoft's page, which
#   says "most Azure regions"); skipped with a warning when az cannot be asked;
# - VNET_ENABLED=true: the Microsoft.App resource provider is registered on the subscription (the
#   app's subnet is delegated to Microsoft.App/environments, and Flex Consumption's VNet integration
#   needs the provider; a deployment registers only the providers of the template's own resource
#   types, so on a subscription that never used Container Apps nothing registers it). Registered
#   here (`az provider register --wait`) when it is not; a refusal stops the provision with the command
#   to ask for; without az or signed out, a warning;
# - opt-in (OPS_AUTH_CREATE_APP=true, OPS_AUTH_CLIENT_ID empty): the Entra ID app registration operators
#   sign in to (docs/deploy.md, "Operators"). Finds the registration named orders-ops-<AZURE_ENV_NAME>
#   or creates it (single tenant, ID-token sign-in, the app roles of infra/ops-app-roles.json,
#   identifier URI api://<appId>, its service principal), then `azd env set OPS_AUTH_CLIENT_ID <appId>`
#   (azd reloads its .env after a hook, so this provision already deploys Easy Auth with it). No
#   secret is created. Without az, signed out, or without Graph rights it warns and goes on without
#   authentication: the ops API then refuses every request. The redirect URI needs the app's host
#   name: scripts/postprovision.sh adds it.
set -eu

ROLES_FILE="$(cd "$(dirname "$0")/.." && pwd)/infra/ops-app-roles.json"

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
case "${OPS_AUTH_CREATE_APP:-false}" in
  true|false|'') ;;
  *) echo "preprovision: OPS_AUTH_CREATE_APP must be 'true' or 'false', not '$OPS_AUTH_CREATE_APP'." >&2; exit 1 ;;
esac
if [ -z "$location" ]; then
  echo "preprovision: AZURE_LOCATION is not set: azd env set AZURE_LOCATION <region> (a Flex Consumption region, e.g. swedencentral)." >&2
  exit 1
fi
if [ "$vnet" = "true" ]; then
  echo "preprovision: VNET_ENABLED=true: Service Bus becomes Premium (1 messaging unit, billed per hour whether used or not; see docs/deploy.md)."
fi

# az on the azd environment's subscription when azd names one (it does once a subscription is chosen).
az_sub() {
  if [ -n "${AZURE_SUBSCRIPTION_ID:-}" ]; then
    az "$@" --subscription "$AZURE_SUBSCRIPTION_ID"
  else
    az "$@"
  fi
}

# 0 when the region names in $1 (one a line, "swedencentral" or "Sweden Central") include AZURE_LOCATION.
lists_location() {
  wanted=$(printf '%s' "$location" | tr 'A-Z' 'a-z' | tr -d ' ')
  printf '%s\n' "$1" | tr 'A-Z' 'a-z' | tr -d ' ' | grep -qx "$wanted"
}

# check_offered WHAT ADVICE AZ-ARGS...: 0 when the regions `az AZ-ARGS` prints include AZURE_LOCATION, or
# az could not be asked (warned; Bicep and ARM still decide); 1 when they do not (listed, with ADVICE).
check_offered() {
  what=$1
  advice=$2
  shift 2
  if ! command -v az >/dev/null 2>&1; then
    echo "preprovision: warning: az (Azure CLI) not found: cannot check that $location offers $what." >&2
    return 0
  fi
  if ! offered=$(az_sub "$@" 2>/dev/null); then
    echo "preprovision: warning: 'az $1 $2' failed (run 'az login'): not checked that $location offers $what." >&2
    return 0
  fi
  if lists_location "$offered"; then
    echo "preprovision: $location offers $what."
    return 0
  fi
  echo "preprovision: $location does not offer $what. Regions that do:" >&2
  printf '%s\n' "$offered" | sed 's/^/  /' >&2
  echo "$advice" >&2
  return 1
}

check_region() {
  check_offered "Flex Consumption with Python $PYTHON_VERSION" "Choose one: azd env set AZURE_LOCATION <region>" \
    functionapp list-flexconsumption-locations --runtime python --runtime-version "$PYTHON_VERSION" --query "[].name" -o tsv
}

# DURABLE_BACKEND=dts: the region offers the scheduler (the query of Microsoft's "Supported regions",
# its list flattened with [] instead of "| [0]").
check_scheduler_region() {
  if [ "$backend" != "dts" ]; then
    return 0
  fi
  check_offered "the Durable Task Scheduler (DURABLE_BACKEND=dts)" \
    "Choose one of them that also offers Flex Consumption (azd env set AZURE_LOCATION <region>), or keep the Azure Storage backend: azd env set DURABLE_BACKEND storage" \
    provider show --namespace Microsoft.DurableTask --query "resourceTypes[?resourceType=='schedulers'].locations[]" -o tsv
}

# 0: not needed, registered, or could not be asked (warned); 1: the registration was refused.
ensure_app_provider() {
  if [ "$vnet" != "true" ]; then
    return 0
  fi
  if ! command -v az >/dev/null 2>&1; then
    echo "preprovision: warning: az (Azure CLI) not found: cannot check that the subscription has the Microsoft.App resource provider registered (VNET_ENABLED=true needs it: az provider register --namespace Microsoft.App)." >&2
    return 0
  fi
  if ! state=$(az_sub provider show --namespace Microsoft.App --query registrationState -o tsv 2>/dev/null); then
    echo "preprovision: warning: 'az provider show --namespace Microsoft.App' failed (run 'az login'): not checked that Microsoft.App is registered (VNET_ENABLED=true needs it)." >&2
    return 0
  fi
  if [ "$state" = "Registered" ]; then
    echo "preprovision: the Microsoft.App resource provider is registered (VNet integration)."
    return 0
  fi
  echo "preprovision: registering the Microsoft.App resource provider (state: ${state:-unknown}); VNET_ENABLED=true needs it for the app's VNet integration. This can take a few minutes."
  if ! az_sub provider register --namespace Microsoft.App --wait; then
    echo "preprovision: could not register the Microsoft.App resource provider, which the app's VNet integration needs. Ask someone who may register providers on the subscription (e.g. Contributor) to run: az provider register --namespace Microsoft.App" >&2
    return 1
  fi
  echo "preprovision: Microsoft.App registered."
}

ops_app_warning() {
  echo "preprovision: warning: $1; the operators' app registration was not created, so App Service authentication stays off and the ops API refuses every request. Fix it and run 'azd provision' again, or register the app by hand (docs/deploy.md, \"Operators\")." >&2
}

# The opt-in app registration for the operators' sign-in (always returns 0 but when azd env set fails).
ensure_ops_app() {
  if [ "${OPS_AUTH_CREATE_APP:-false}" != "true" ]; then
    return 0
  fi
  if [ -n "${OPS_AUTH_CLIENT_ID:-}" ]; then
    echo "preprovision: OPS_AUTH_CLIENT_ID is set ($OPS_AUTH_CLIENT_ID): using that app registration, none created."
    return 0
  fi
  if ! command -v az >/dev/null 2>&1; then
    ops_app_warning "OPS_AUTH_CREATE_APP=true but az (Azure CLI) was not found"
    return 0
  fi
  if ! az account show -o none >/dev/null 2>&1; then
    ops_app_warning "OPS_AUTH_CREATE_APP=true but az is not signed in (run 'az login')"
    return 0
  fi
  if [ -z "${AZURE_ENV_NAME:-}" ]; then
    ops_app_warning "AZURE_ENV_NAME is not set (run the hook through azd: azd hooks run preprovision)"
    return 0
  fi
  name="orders-ops-$AZURE_ENV_NAME"
  if ! found=$(az ad app list --filter "displayName eq '$name'" --query "[].appId" -o tsv); then
    ops_app_warning "'az ad app list' failed"
    return 0
  fi
  count=$(printf '%s' "$found" | grep -c . || true)
  if [ "$count" -gt 1 ]; then
    ops_app_warning "$count app registrations are named $name: choose one with 'azd env set OPS_AUTH_CLIENT_ID <appId>'"
    return 0
  fi
  if [ "$count" -eq 1 ]; then
    app_id=$found
    echo "preprovision: reusing the app registration $name ($app_id)."
    roles=$(az ad app show --id "$app_id" --query "appRoles[].value" -o tsv 2>/dev/null || true)
    for role in Orders.Read Orders.Operate; do
      if ! printf '%s\n' "$roles" | grep -qx "$role"; then
        echo "preprovision: warning: the app registration $name has no app role $role: add the roles of infra/ops-app-roles.json (az ad app update --id $app_id --app-roles @infra/ops-app-roles.json)." >&2
      fi
    done
  else
    if ! app_id=$(az ad app create --display-name "$name" --sign-in-audience AzureADMyOrg \
        --app-roles "@$ROLES_FILE" --enable-id-token-issuance true --query appId -o tsv) || [ -z "$app_id" ]; then
      ops_app_warning "'az ad app create' failed (if your tenant does not let users register applications, you need the Application Developer role)"
      return 0
    fi
    echo "preprovision: created the app registration $name ($app_id) with the app roles Orders.Read and Orders.Operate."
    if ! az ad app update --id "$app_id" --identifier-uris "api://$app_id"; then
      echo "preprovision: warning: could not set the identifier URI api://$app_id (az ad app update --id $app_id --identifier-uris api://$app_id)." >&2
    fi
  fi
  if ! az ad sp show --id "$app_id" -o none >/dev/null 2>&1; then
    if ! az ad sp create --id "$app_id" -o none; then
      echo "preprovision: warning: could not create the service principal of $app_id (needed to give people a role: az ad sp create --id $app_id)." >&2
    fi
  fi
  if ! azd env set OPS_AUTH_CLIENT_ID "$app_id"; then
    echo "preprovision: 'azd env set OPS_AUTH_CLIENT_ID $app_id' failed; run it yourself, then 'azd provision'." >&2
    return 1
  fi
  echo "preprovision: OPS_AUTH_CLIENT_ID=$app_id (App Service authentication on; the postprovision hook adds the redirect URI)."
}

check_region || exit 1
check_scheduler_region || exit 1
ensure_app_provider || exit 1
ensure_ops_app || exit 1
exit 0
