# azd postprovision hook (Windows): merges into local.settings.json what `func start` needs against
# the provisioned resources. Same behaviour as postprovision.sh: Service Bus and Cosmos DB in Azure
# with your `az login` identity; host and Durable storage on Azurite.
#
# Merge, not overwrite. The hook changes only these keys under "Values"; everything else in the
# file is kept as it is:
#   owned    - always set from the azd environment; on a conflict the provisioned value wins:
#              ServiceBusConnection__fullyQualifiedNamespace, COSMOS_ENDPOINT, COSMOS_DATABASE,
#              COSMOS_VERIFY_TLS.
#   removed  - ServiceBusConnection and COSMOS_KEY (emulator credentials that would take precedence
#              over the identity-based connections).
#   defaults - added only when missing; on a conflict YOUR value wins: host settings, telemetry
#              switches, the timer schedules and every tuning setting at its settings.py default.
# Before changing the file the hook copies it to local.settings.json.<UTC time>.bak; a run that
# changes nothing writes nothing. A file that is not valid JSON, or is encrypted, is left untouched
# and the hook fails with the reason. The key lists below are the same as in postprovision.sh
# (tests/infra/test_postprovision.py checks it).
#
# Operators' sign-in, as in postprovision.sh: with OPS_AUTH_CREATE_APP=true and OPS_AUTH_CLIENT_ID set,
# adds https://<host>/.auth/login/aad/callback (<host> from OPS_CONSOLE_URL) to the registration's web
# redirect URIs (kept, not replaced); a registration you made yourself is not touched (the URI to add
# is printed); without az, or signed out, it warns and goes on.
$ErrorActionPreference = 'Stop'
Set-Location (Join-Path $PSScriptRoot '..')

# `azd env get-values` prints KEY="value" lines.
$values = @{}
foreach ($line in (azd env get-values)) {
    if ($line -match '^([^=]+)="(.*)"$') {
        $values[$Matches[1]] = $Matches[2]
    }
}

$sbNamespace = $values['SERVICEBUS_FULLY_QUALIFIED_NAMESPACE']
$cosmosEndpoint = $values['COSMOS_ENDPOINT']
$cosmosDatabase = $values['COSMOS_DATABASE']
if (-not $sbNamespace -or -not $cosmosEndpoint -or -not $cosmosDatabase) {
    Write-Error "postprovision: SERVICEBUS_FULLY_QUALIFIED_NAMESPACE, COSMOS_ENDPOINT or COSMOS_DATABASE is missing from the azd environment; run 'azd provision' first."
    exit 1
}

# Adds the sign-in redirect URI to the operators' app registration (see the header). Never fails the hook.
function Add-OpsRedirectUri {
    $clientId = $values['OPS_AUTH_CLIENT_ID']
    if (-not $clientId) { return }
    $hostName = if ($values['OPS_CONSOLE_URL'] -match '^https://([^/]+)/') { $Matches[1] } else { $null }
    if (-not $hostName) {
        Write-Warning 'postprovision: OPS_CONSOLE_URL is missing from the azd environment: the sign-in redirect URI was not added.'
        return
    }
    $uri = "https://$hostName/.auth/login/aad/callback"
    if ($values['OPS_AUTH_CREATE_APP'] -ne 'true') {
        Write-Host "postprovision: the app registration $clientId is yours (OPS_AUTH_CREATE_APP is not 'true'): sign-in needs its web redirect URI $uri (docs/deploy.md)."
        return
    }
    if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
        Write-Warning "postprovision: az (Azure CLI) not found: add the redirect URI yourself: az ad app update --id $clientId --web-redirect-uris $uri"
        return
    }
    $existing = @(az ad app show --id $clientId --query "web.redirectUris" -o tsv | Where-Object { $_ })
    if ($LASTEXITCODE -ne 0) {
        Write-Warning "postprovision: could not read the app registration $clientId (run 'az login', then 'azd hooks run postprovision'): redirect URI $uri not added."
        return
    }
    if ($existing -contains $uri) {
        Write-Host "postprovision: the app registration $clientId already has the redirect URI $uri"
        return
    }
    az ad app update --id $clientId --web-redirect-uris @($existing + $uri)
    if ($LASTEXITCODE -ne 0) {
        Write-Warning "postprovision: could not add the redirect URI $uri to $clientId (az ad app update --id $clientId --web-redirect-uris ...)."
        return
    }
    Write-Host "postprovision: added the redirect URI $uri to the app registration $clientId"
}
Add-OpsRedirectUri

# owned: always set from the azd environment (the provisioned value wins).
$Owned = [ordered]@{
    'ServiceBusConnection__fullyQualifiedNamespace' = $sbNamespace
    'COSMOS_ENDPOINT' = $cosmosEndpoint
    'COSMOS_DATABASE' = $cosmosDatabase
    'COSMOS_VERIFY_TLS' = 'true'
}
# removed: emulator credentials that would override the identity-based connections.
$Removed = @('ServiceBusConnection', 'COSMOS_KEY')
# defaults: added only when missing (your value wins).
$Defaults = [ordered]@{
    'FUNCTIONS_WORKER_RUNTIME' = 'python'
    'AzureWebJobsStorage' = 'UseDevelopmentStorage=true'
    'APPLICATIONINSIGHTS_CONNECTION_STRING' = ''
    'PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY' = 'false'
    'PYTHON_ENABLE_OPENTELEMETRY' = 'true'
    'PYTHON_THREADPOOL_THREAD_COUNT' = '104'
    'MAX_PENDING' = '1000'
    'MAX_IN_FLIGHT' = '200'
    'STATE_COUNT_CACHE_SECONDS' = '5'
    'START_GRACE_SECONDS' = '60'
    'STARTER_BATCH_SIZE' = '50'
    'STARTER_SCHEDULE' = '*/20 * * * * *'
    'STEP_TIMEOUT_SECONDS' = '60'
    'AGENT_MAX_ATTEMPTS' = '4'
    'AGENT_RETRY_BASE_MS' = '500'
    'AGENT_RETRY_MAX_MS' = '8000'
    'INVENTORY_SERVICE_URL' = ''
    'PAYMENT_SERVICE_URL' = ''
    'SHIPPING_SERVICE_URL' = ''
    'PAYMENT_BACKUP_SERVICE_URL' = ''
    'REVIEW_AMOUNT_THRESHOLD_CENTS' = '100000'
    'REVIEW_TIMEOUT_SECONDS' = '86400'
    'REVIEW_DEFAULT_ACTION' = 'compensate'
    'SUPERVISOR_SCHEDULE' = '*/30 * * * * *'
    'MAX_FAILURES' = '3'
    'RETRY_BACKOFF_BASE_SECONDS' = '10'
    'RETRY_BACKOFF_MAX_SECONDS' = '300'
    'SUPERVISOR_BACKEND_WAIT_SECONDS' = '600'
    'SUPERVISOR_MAX_RECORDS' = '100'
    'SUPERVISOR_PAGE_SIZE' = '25'
    'SUPERVISOR_WINDOW_MINUTES' = '60'
    'SUPERVISOR_CATCHUP_EVERY' = '10'
    'CIRCUIT_FAILURE_THRESHOLD' = '8'
    'CIRCUIT_COOLDOWN_SECONDS' = '30'
    'CIRCUIT_COOLDOWN_MAX_SECONDS' = '240'
    'CIRCUIT_PROBES' = '1'
    'CIRCUIT_HEALTH_CACHE_SECONDS' = '5'
    'MAX_OUTAGE_WAIT_MINUTES' = '60'
    'OUTAGE_SETTLE_SECONDS' = '300'
    'PAYMENT_WAIT_MINUTES' = '60'
    'DEFER_RETRY_DELAY_SECONDS' = '30'
    'DEFER_MAX_ROUNDS' = '3'
    'PEEK_SWEEP_SCHEDULE' = '0 */5 * * * *'
    'PEEK_SWEEP_AGE_MINUTES' = '10'
    'PEEK_SWEEP_MAX_MESSAGES' = '500'
    'ORDERLESS_PAYMENT_ALERT_MINUTES' = '120'
    'DURABLE_HISTORY_RETENTION_DAYS' = '30'
}

function Fail([string]$reason) {
    [Console]::Error.WriteLine("postprovision: $reason; local.settings.json was not changed.")
    exit 2
}

$path = Join-Path (Get-Location) 'local.settings.json'
$previous = $null
if (Test-Path $path) {
    $previous = [System.IO.File]::ReadAllText($path)
    try {
        $document = $previous | ConvertFrom-Json
    } catch {
        Fail "the existing local.settings.json is not valid JSON ($($_.Exception.Message)); fix it or move it away and run 'azd hooks run postprovision' again"
    }
    if ($document -isnot [System.Management.Automation.PSCustomObject]) {
        Fail 'the existing local.settings.json is not an object with a "Values" object'
    }
    if ($null -ne $document.Values -and $document.Values -isnot [System.Management.Automation.PSCustomObject]) {
        Fail 'the existing local.settings.json is not an object with a "Values" object'
    }
    if ($document.IsEncrypted -eq $true) {
        Fail "the existing local.settings.json is encrypted (IsEncrypted: true); run 'func settings decrypt' first"
    }
} else {
    $document = [pscustomobject]@{ IsEncrypted = $false }
}

if ($null -eq $document.PSObject.Properties['IsEncrypted']) {
    $document | Add-Member -NotePropertyName 'IsEncrypted' -NotePropertyValue $false
}
if ($null -eq $document.PSObject.Properties['Values']) {
    $document | Add-Member -NotePropertyName 'Values' -NotePropertyValue ([pscustomobject]@{})
}
$settings = $document.Values
$replaced = @(); $added = @(); $removedKeys = @(); $kept = @()

foreach ($key in $Removed) {
    if ($null -ne $settings.PSObject.Properties[$key]) {
        $settings.PSObject.Properties.Remove($key)
        $removedKeys += $key
    }
}
foreach ($key in $Owned.Keys) {
    $property = $settings.PSObject.Properties[$key]
    if ($null -eq $property) {
        $settings | Add-Member -NotePropertyName $key -NotePropertyValue $Owned[$key]
        $added += $key
    } else {
        if ($property.Value -ne $Owned[$key]) { $replaced += $key }
        $property.Value = $Owned[$key]
    }
}
foreach ($key in $Defaults.Keys) {
    $property = $settings.PSObject.Properties[$key]
    if ($null -eq $property) {
        $settings | Add-Member -NotePropertyName $key -NotePropertyValue $Defaults[$key]
        $added += $key
    } elseif ($property.Value -ne $Defaults[$key]) {
        $kept += $key
    }
}

$text = ($document | ConvertTo-Json -Depth 20) + "`n"
if ($null -ne $previous -and $previous -eq $text) {
    Write-Host 'postprovision: local.settings.json is already up to date'
    exit 0
}

if ($null -ne $previous) {
    $stamp = (Get-Date).ToUniversalTime().ToString('yyyyMMddTHHmmssZ')
    $backup = "local.settings.json.$stamp.bak"
    $n = 1
    while (Test-Path $backup) {
        $backup = "local.settings.json.$stamp-$n.bak"
        $n += 1
    }
    Copy-Item $path $backup
    Write-Host "postprovision: saved the previous local.settings.json as $backup"
}

# Write to a temporary file beside it, then rename: an interrupted run leaves the old file whole.
$temporary = "$path.tmp"
[System.IO.File]::WriteAllText($temporary, $text, (New-Object System.Text.UTF8Encoding($false)))
Move-Item -Force $temporary $path

Write-Host "postprovision: merged local.settings.json (Service Bus $sbNamespace, Cosmos DB $cosmosEndpoint)"
if ($replaced.Count) { Write-Host "postprovision:   set from azd, replacing your value: $($replaced -join ', ')" }
if ($removedKeys.Count) { Write-Host "postprovision:   removed (emulator credentials; the old values are in the backup): $($removedKeys -join ', ')" }
if ($kept.Count) { Write-Host "postprovision:   kept your value instead of the default: $($kept -join ', ')" }
if ($added.Count) { Write-Host "postprovision:   added $($added.Count) settings" }
