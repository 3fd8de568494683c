# azd preprovision hook (Windows): the same checks as preprovision.sh, and the same opt-in app
# registration for the operators' sign-in (OPS_AUTH_CREATE_APP=true, OPS_AUTH_CLIENT_ID empty: find or
# create orders-ops-<AZURE_ENV_NAME> with the app roles of infra/ops-app-roles.json, identifier URI
# api://<appId>, its service principal, then `azd env set OPS_AUTH_CLIENT_ID <appId>`; no secret).
# Without az, signed out, or without the right to register applications it warns and goes on: the ops
# API then refuses every request. scripts/postprovision.ps1 adds the redirect URI.
# DURABLE_BACKEND=dts: checks that the region offers the Durable Task Scheduler (see preprovision.sh).
# VNET_ENABLED=true: registers the Microsoft.App resource provider when the subscription lacks it (the
# app's VNet integration needs it; see preprovision.sh).
$ErrorActionPreference = 'Stop'
$RolesFile = Join-Path (Join-Path (Join-Path $PSScriptRoot '..') 'infra') 'ops-app-roles.json'
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
$createApp = if ($env:OPS_AUTH_CREATE_APP) { $env:OPS_AUTH_CREATE_APP } else { 'false' }
if ($createApp -cnotin @('true', 'false')) {
  Write-Error "preprovision: OPS_AUTH_CREATE_APP must be 'true' or 'false', not '$createApp'."
  exit 1
}
if (-not $location) {
  Write-Error "preprovision: AZURE_LOCATION is not set: azd env set AZURE_LOCATION <region> (a Flex Consumption region, e.g. swedencentral)."
  exit 1
}
if ($vnet -eq 'true') {
  Write-Host "preprovision: VNET_ENABLED=true: Service Bus becomes Premium (1 messaging unit, billed per hour whether used or not; see docs/deploy.md)."
}
# az on the azd environment's subscription when azd names one (it does once a subscription is chosen).
$Subscription = @()
if ($env:AZURE_SUBSCRIPTION_ID) { $Subscription = @('--subscription', $env:AZURE_SUBSCRIPTION_ID) }

# $true when the region names ("swedencentral" or "Sweden Central") include AZURE_LOCATION.
function Test-ListsLocation($regions) {
  $wanted = $location.ToLower().Replace(' ', '')
  return [bool]($regions | Where-Object { $_.ToLower().Replace(' ', '') -eq $wanted })
}

# $true when the regions `az $azArgs` prints include AZURE_LOCATION, or az could not be asked (warned; Bicep
# and ARM still decide); $false when they do not (listed, with $advice).
function Test-Offered([string]$what, [string]$advice, [string[]]$azArgs) {
  if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
    Write-Warning "preprovision: az (Azure CLI) not found: cannot check that $location offers $what."
    return $true
  }
  $offered = @(az @azArgs @Subscription 2>$null)
  if ($LASTEXITCODE -ne 0) {
    Write-Warning "preprovision: 'az $($azArgs[0]) $($azArgs[1])' failed (run 'az login'): not checked that $location offers $what."
    return $true
  }
  if (Test-ListsLocation $offered) {
    Write-Host "preprovision: $location offers $what."
    return $true
  }
  [Console]::Error.WriteLine("preprovision: $location does not offer $what. Regions that do:`n  " + ($offered -join "`n  ") + "`n$advice")
  return $false
}

function Test-Region {
  return Test-Offered "Flex Consumption with Python $PythonVersion" 'Choose one: azd env set AZURE_LOCATION <region>' `
    @('functionapp', 'list-flexconsumption-locations', '--runtime', 'python', '--runtime-version', $PythonVersion, '--query', '[].name', '-o', 'tsv')
}

# DURABLE_BACKEND=dts: the region offers the scheduler (the query of Microsoft's "Supported regions",
# its list flattened with [] instead of "| [0]").
function Test-SchedulerRegion {
  if ($backend -ne 'dts') { return $true }
  return Test-Offered 'the Durable Task Scheduler (DURABLE_BACKEND=dts)' `
    'Choose one of them that also offers Flex Consumption (azd env set AZURE_LOCATION <region>), or keep the Azure Storage backend: azd env set DURABLE_BACKEND storage' `
    @('provider', 'show', '--namespace', 'Microsoft.DurableTask', '--query', "resourceTypes[?resourceType=='schedulers'].locations[]", '-o', 'tsv')
}

# $true: not needed, registered, or could not be asked (warned); $false: the registration was refused.
function Register-AppProvider {
  if ($vnet -ne 'true') { return $true }
  if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
    Write-Warning "preprovision: az (Azure CLI) not found: cannot check that the subscription has the Microsoft.App resource provider registered (VNET_ENABLED=true needs it: az provider register --namespace Microsoft.App)."
    return $true
  }
  $state = az provider show --namespace Microsoft.App --query registrationState -o tsv @Subscription 2>$null
  if ($LASTEXITCODE -ne 0) {
    Write-Warning "preprovision: 'az provider show --namespace Microsoft.App' failed (run 'az login'): not checked that Microsoft.App is registered (VNET_ENABLED=true needs it)."
    return $true
  }
  if ($state -eq 'Registered') {
    Write-Host "preprovision: the Microsoft.App resource provider is registered (VNet integration)."
    return $true
  }
  Write-Host "preprovision: registering the Microsoft.App resource provider (state: $state); VNET_ENABLED=true needs it for the app's VNet integration. This can take a few minutes."
  az provider register --namespace Microsoft.App --wait @Subscription | Out-Host
  if ($LASTEXITCODE -ne 0) {
    [Console]::Error.WriteLine("preprovision: could not register the Microsoft.App resource provider, which the app's VNet integration needs. Ask someone who may register providers on the subscription (e.g. Contributor) to run: az provider register --namespace Microsoft.App")
    return $false
  }
  Write-Host "preprovision: Microsoft.App registered."
  return $true
}

function Write-OpsAppWarning([string]$reason) {
  Write-Warning "preprovision: $reason; the operators' app registration was not created, so App Service authentication stays off and the ops API refuses every request. Fix it and run 'azd provision' again, or register the app by hand (docs/deploy.md, `"Operators`")."
}

# The opt-in app registration for the operators' sign-in; $false only when azd env set fails.
function Set-OpsApp {
  if ($createApp -ne 'true') { return $true }
  if ($env:OPS_AUTH_CLIENT_ID) {
    Write-Host "preprovision: OPS_AUTH_CLIENT_ID is set ($($env:OPS_AUTH_CLIENT_ID)): using that app registration, none created."
    return $true
  }
  if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
    Write-OpsAppWarning 'OPS_AUTH_CREATE_APP=true but az (Azure CLI) was not found'
    return $true
  }
  az account show -o none 2>$null
  if ($LASTEXITCODE -ne 0) {
    Write-OpsAppWarning "OPS_AUTH_CREATE_APP=true but az is not signed in (run 'az login')"
    return $true
  }
  if (-not $env:AZURE_ENV_NAME) {
    Write-OpsAppWarning 'AZURE_ENV_NAME is not set (run the hook through azd: azd hooks run preprovision)'
    return $true
  }
  $name = "orders-ops-$($env:AZURE_ENV_NAME)"
  $found = @(az ad app list --filter "displayName eq '$name'" --query "[].appId" -o tsv | Where-Object { $_ })
  if ($LASTEXITCODE -ne 0) {
    Write-OpsAppWarning "'az ad app list' failed"
    return $true
  }
  if ($found.Count -gt 1) {
    Write-OpsAppWarning "$($found.Count) app registrations are named ${name}: choose one with 'azd env set OPS_AUTH_CLIENT_ID <appId>'"
    return $true
  }
  if ($found.Count -eq 1) {
    $appId = $found[0]
    Write-Host "preprovision: reusing the app registration $name ($appId)."
    $roles = @(az ad app show --id $appId --query "appRoles[].value" -o tsv 2>$null)
    foreach ($role in @('Orders.Read', 'Orders.Operate')) {
      if ($roles -notcontains $role) {
        Write-Warning "preprovision: the app registration $name has no app role ${role}: add the roles of infra/ops-app-roles.json (az ad app update --id $appId --app-roles @infra/ops-app-roles.json)."
      }
    }
  } else {
    $appId = az ad app create --display-name $name --sign-in-audience AzureADMyOrg `
      --app-roles "@$RolesFile" --enable-id-token-issuance true --query appId -o tsv
    if ($LASTEXITCODE -ne 0 -or -not $appId) {
      Write-OpsAppWarning "'az ad app create' failed (if your tenant does not let users register applications, you need the Application Developer role)"
      return $true
    }
    Write-Host "preprovision: created the app registration $name ($appId) with the app roles Orders.Read and Orders.Operate."
    az ad app update --id $appId --identifier-uris "api://$appId" | Out-Host
    if ($LASTEXITCODE -ne 0) {
      Write-Warning "preprovision: could not set the identifier URI api://$appId (az ad app update --id $appId --identifier-uris api://$appId)."
    }
  }
  az ad sp show --id $appId -o none 2>$null
  if ($LASTEXITCODE -ne 0) {
    az ad sp create --id $appId -o none | Out-Host
    if ($LASTEXITCODE -ne 0) {
      Write-Warning "preprovision: could not create the service principal of $appId (needed to give people a role: az ad sp create --id $appId)."
    }
  }
  azd env set OPS_AUTH_CLIENT_ID $appId | Out-Host
  if ($LASTEXITCODE -ne 0) {
    [Console]::Error.WriteLine("preprovision: 'azd env set OPS_AUTH_CLIENT_ID $appId' failed; run it yourself, then 'azd provision'.")
    return $false
  }
  Write-Host "preprovision: OPS_AUTH_CLIENT_ID=$appId (App Service authentication on; the postprovision hook adds the redirect URI)."
  return $true
}

if (-not (Test-Region)) { exit 1 }
if (-not (Test-SchedulerRegion)) { exit 1 }
if (-not (Register-AppProvider)) { exit 1 }
if (-not (Set-OpsApp)) { exit 1 }
exit 0
