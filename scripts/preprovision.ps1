# azd preprovision hook (Windows): the same checks as preprovision.sh.
$ErrorActionPreference = 'Stop'
$PythonVersion = '3.13'   # infra/modules/functionapp.bicep functionAppConfig.runtime.version

$location = $env:AZURE_LOCATION
$backend = if ($env:DURABLE_BACKEND) { $env:DURABLE_BACKEND } else { 'storage' }
$vnet = if ($env:VNET_ENABLED) { $env:VNET_ENABLED } else { 'false' }

if ($backend -notin @('storage', 'dts')) {
  Write-Error "preprovision: DURABLE_BACKEND must be 'storage' or 'dts', not '$backend' (azd env set DURABLE_BACKEND storage)."
  exit 1
}
if ($vnet -notin @('true', 'false')) {
  Write-Error "preprovision: VNET_ENABLED must be 'true' or 'false', not '$vnet'."
  exit 1
}
if (-not $location) {
  Write-Error "preprovision: AZURE_LOCATION is not set: azd env set AZURE_LOCATION <region> (a Flex Consumption region, e.g. swedencentral)."
  exit 1
}
if ($vnet -eq 'true') {
  Write-Host "preprovision: VNET_ENABLED=true: Service Bus becomes Premium (1 messaging unit, billed per hour whether used or not; see docs/deploy.md)."
}
if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
  Write-Warning "preprovision: az (Azure CLI) not found: cannot check that $location offers Flex Consumption with Python $PythonVersion."
  exit 0
}
$regions = az functionapp list-flexconsumption-locations --runtime python --runtime-version $PythonVersion --query "[].name" -o tsv 2>$null
if ($LASTEXITCODE -ne 0) {
  Write-Warning "preprovision: 'az functionapp list-flexconsumption-locations' failed (run 'az login'): region $location not checked."
  exit 0
}
$wanted = $location.ToLower().Replace(' ', '')
if ($regions | Where-Object { $_.ToLower().Replace(' ', '') -eq $wanted }) {
  Write-Host "preprovision: $location offers Flex Consumption with Python $PythonVersion."
  exit 0
}
Write-Error ("preprovision: $location does not offer Flex Consumption with Python $PythonVersion. Regions that do:`n  " + ($regions -join "`n  ") + "`nChoose one: azd env set AZURE_LOCATION <region>")
exit 1
