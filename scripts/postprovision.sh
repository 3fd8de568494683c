#!/bin/sh
# azd postprovision hook: writes local.settings.json for `func start` against the provisioned
# resources (Service Bus and Cosmos DB in Azure, reached with your `az login` identity, which
# infra/modules/rbac.bicep granted the same data roles as the app). The Functions host's own
# storage (timers, Durable task hub) stays on Azurite, so a local run never competes with the
# deployed app for Durable work items. Run it again any time: `azd hooks run postprovision`.
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

if [ -f local.settings.json ]; then
  cp local.settings.json local.settings.json.bak
  echo "postprovision: saved the previous local.settings.json as local.settings.json.bak"
fi

cat > local.settings.json <<JSON
{
  "IsEncrypted": false,
  "Values": {
    "FUNCTIONS_WORKER_RUNTIME": "python",
    "AzureWebJobsStorage": "UseDevelopmentStorage=true",
    "ServiceBusConnection__fullyQualifiedNamespace": "$sb_namespace",
    "COSMOS_ENDPOINT": "$cosmos_endpoint",
    "COSMOS_DATABASE": "$cosmos_database",
    "COSMOS_VERIFY_TLS": "true"
  }
}
JSON
echo "postprovision: wrote local.settings.json (Service Bus $sb_namespace, Cosmos DB $cosmos_endpoint)"
