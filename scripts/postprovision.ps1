# azd postprovision hook (Windows): writes local.settings.json for `func start` against the
# provisioned resources. Same behaviour as postprovision.sh: Service Bus and Cosmos DB in Azure
# with your `az login` identity; host and Durable storage on Azurite.
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

if (Test-Path 'local.settings.json') {
    Copy-Item 'local.settings.json' 'local.settings.json.bak' -Force
    Write-Host 'postprovision: saved the previous local.settings.json as local.settings.json.bak'
}

$settings = [ordered]@{
    IsEncrypted = $false
    Values      = [ordered]@{
        FUNCTIONS_WORKER_RUNTIME                       = 'python'
        AzureWebJobsStorage                            = 'UseDevelopmentStorage=true'
        'ServiceBusConnection__fullyQualifiedNamespace' = $sbNamespace
        COSMOS_ENDPOINT                                = $cosmosEndpoint
        COSMOS_DATABASE                                = $cosmosDatabase
        COSMOS_VERIFY_TLS                              = 'true'
    }
}
$settings | ConvertTo-Json -Depth 5 | Set-Content -Path 'local.settings.json' -Encoding utf8
Write-Host "postprovision: wrote local.settings.json (Service Bus $sbNamespace, Cosmos DB $cosmosEndpoint)"
