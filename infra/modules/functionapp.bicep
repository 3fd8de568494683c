// The function app on Flex Consumption (Linux, Python 3.13), deployed by azd from a blob
// container, running as the user-assigned identity for every connection.

param name string
param planName string
param location string
param tags object

@description('Resource id of the user-assigned managed identity.')
param identityId string

@description('Client id of the user-assigned managed identity.')
param identityClientId string

param storageAccountName string
param deploymentContainerName string
param applicationInsightsName string

@description('Service Bus host name, e.g. sb-x.servicebus.windows.net.')
param serviceBusNamespaceFqdn string

param cosmosEndpoint string
param cosmosDatabaseName string

@minValue(40)
@maxValue(1000)
param maximumInstanceCount int

// Flex Consumption instance sizes (flex-consumption-plan, "Instance memory").
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int

@description('Durable Functions backend: storage (Azure Storage, host.json as is) or dts (Durable Task Scheduler).')
@allowed([
  'storage'
  'dts'
])
param durableBackend string

@description('Durable Task Scheduler endpoint (https://<scheduler>.<region>.durabletask.io); empty with durableBackend storage.')
param durableTaskSchedulerEndpoint string

@description('Subnet (delegated to Microsoft.App/environments) for VNet integration; empty: no VNet.')
param appSubnetId string

@description('OPS_AUTH_CLIENT_ID: client id of the Entra ID app registration operators sign in to (app roles Orders.Read and Orders.Operate, docs/deploy.md#operators-sign-in-app-roles-the-console-and-the-workbook). Empty: App Service authentication stays off and the ops API refuses every request.')
param opsAuthClientId string = ''

// DURABLE_BACKEND=dts: the same host.json, its durableTask storage provider overridden by app
// settings (AzureFunctionsJobHost__<path>, "Override host.json values" in the host.json reference):
// type azureManaged, connection from DURABLE_TASK_SCHEDULER_CONNECTION_STRING, signed in with the
// app identity. The hub stays host.json's hubName (the task hub durabletask.bicep creates). Needs
// extension bundle 4.32.0 or later: host.json's [4.*, 5.0.0) resolves to the newest 4.x in Azure.
var durableTaskSchedulerSettings = {
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__type: 'azureManaged'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName: 'DURABLE_TASK_SCHEDULER_CONNECTION_STRING'
  DURABLE_TASK_SCHEDULER_CONNECTION_STRING: 'Endpoint=${durableTaskSchedulerEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}'
}

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  //checkov:skip=CKV_AZURE_225:Flex Consumption zone redundancy is region-dependent and not the default; enable zoneRedundant per environment where the region supports it.
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource site 'Microsoft.Web/sites@2024-04-01' = {
  //checkov:skip=CKV_AZURE_222:azd deploys over the public deployment endpoint and the app has no VNet by default; the app exposes no HTTP trigger that accepts orders (intake is the orders queue).
  //checkov:skip=CKV_AZURE_17:No HTTP API for clients: orders arrive on Service Bus, so there is no caller to present a client certificate.
  //checkov:skip=CKV_AZURE_212:Flex Consumption scales from zero on queue and timer load; always-ready instances are a cost choice per environment.
  //checkov:skip=CKV_AZURE_213:No HTTP endpoint to probe; Flex Consumption does not use App Service health check for queue and timer functions.
  //checkov:skip=CKV_AZURE_78:Flex Consumption has no FTP(S) endpoint; setting siteConfig.ftpsState is rejected in some regions (tools/bicepcheck/rules.py flex-no-ftps).
  name: name
  location: location
  // azd finds the app to deploy the `api` service to by this tag.
  tags: union(tags, {
    'azd-service-name': 'api'
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    // VNET_ENABLED: outbound traffic to Storage, Service Bus and Cosmos DB goes through the VNet
    // to their private endpoints (network.bicep).
    virtualNetworkSubnetId: empty(appSubnetId) ? null : appSubnetId
    // No ftpsState: Flex Consumption has no FTP(S) endpoint and some regions reject the setting.
    siteConfig: {
      minTlsVersion: '1.2'
      http20Enabled: true
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storageAccount.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        // HTTP requests one instance takes at once (the ops routes), fixed rather than the instance size's
        // default so that PYTHON_THREADPOOL_THREAD_COUNT covers them (settings.py HTTP_PER_INSTANCE_CONCURRENCY).
        triggers: {
          http: {
            perInstanceConcurrency: 16
          }
        }
      }
      runtime: {
        name: 'python'
        version: '3.13'
      }
    }
  }
}

// App settings. Flex Consumption takes the runtime from functionAppConfig: no
// FUNCTIONS_WORKER_RUNTIME or FUNCTIONS_EXTENSION_VERSION here. Every setting the code reads
// with where = both/azure in settings.py is listed (a test checks it); tuning values are the
// settings.py defaults (a test checks that too), change them here per environment.
resource appSettings 'Microsoft.Web/sites/config@2024-04-01' = {
  //checkov:skip=CKV_AZURE_13:This is the appsettings resource (key/value pairs); checkov applies web-site config checks to it. Not applicable.
  //checkov:skip=CKV_AZURE_63:Not applicable to the appsettings resource (see CKV_AZURE_13); the app logs through Application Insights.
  //checkov:skip=CKV_AZURE_65:Not applicable to the appsettings resource (see CKV_AZURE_13).
  //checkov:skip=CKV_AZURE_66:Not applicable to the appsettings resource (see CKV_AZURE_13).
  //checkov:skip=CKV_AZURE_80:Not applicable: a Python app, and this is the appsettings resource.
  //checkov:skip=CKV_AZURE_88:Not applicable: Flex Consumption deploys from a blob container, not Azure Files.
  //checkov:skip=CKV_AZURE_222:Not applicable to the appsettings resource; see the same skip on the site.
  parent: site
  name: 'appsettings'
  // The settings below for every backend, plus durableTaskSchedulerSettings with DURABLE_BACKEND=dts.
  properties: union({
    // Host and Durable Functions storage (Azure Storage backend), identity-based.
    AzureWebJobsStorage__credential: 'managedidentity'
    AzureWebJobsStorage__clientId: identityClientId
    AzureWebJobsStorage__blobServiceUri: storageAccount.properties.primaryEndpoints.blob
    AzureWebJobsStorage__queueServiceUri: storageAccount.properties.primaryEndpoints.queue
    AzureWebJobsStorage__tableServiceUri: storageAccount.properties.primaryEndpoints.table
    // Telemetry, authenticated with the identity (Application Insights has local auth off).
    APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'Authorization=AAD;ClientId=${identityClientId}'
    // One telemetry path (docs/observability.md): the app exports (observability/setup.py), the
    // worker does not set up its own export, and it tells the host (telemetryMode OpenTelemetry in
    // host.json) not to export the log records it forwards.
    PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY: 'false'
    PYTHON_ENABLE_OPENTELEMETRY: 'true'
    // The worker's threads for sync functions: the sync concurrency one instance allows (settings.py
    // sync_concurrency: 3 request queues x maxConcurrentCalls 16 + maxConcurrentActivityFunctions 40 +
    // perInstanceConcurrency 16 below). Unset, the pool is min(32, cores + 4), 5 on one core
    // (docs/settings.md, "The worker's threads").
    PYTHON_THREADPOOL_THREAD_COUNT: '104'
    // Service Bus triggers and the SDK sender: connection "ServiceBusConnection", identity-based.
    ServiceBusConnection__fullyQualifiedNamespace: serviceBusNamespaceFqdn
    ServiceBusConnection__credential: 'managedidentity'
    ServiceBusConnection__clientId: identityClientId
    // Cosmos DB with the identity (no key).
    COSMOS_ENDPOINT: cosmosEndpoint
    COSMOS_DATABASE: cosmosDatabaseName
    AZURE_CLIENT_ID: identityClientId
    // azure-identity's DefaultAzureCredential (adapters/identity.py) tries only the managed identity.
    AZURE_TOKEN_CREDENTIALS: 'ManagedIdentityCredential'
    // Intake and starter
    MAX_PENDING: '1000'
    MAX_IN_FLIGHT: '200'
    STATE_COUNT_CACHE_SECONDS: '5'
    START_GRACE_SECONDS: '60'
    STARTER_BATCH_SIZE: '50'
    STARTER_SCHEDULE: '*/20 * * * * *'
    // Scheduler and agents
    STEP_TIMEOUT_SECONDS: '60'
    AGENT_MAX_ATTEMPTS: '4'
    AGENT_RETRY_BASE_MS: '500'
    AGENT_RETRY_MAX_MS: '8000'
    INVENTORY_SERVICE_URL: ''
    PAYMENT_SERVICE_URL: ''
    SHIPPING_SERVICE_URL: ''
    PAYMENT_BACKUP_SERVICE_URL: ''
    // Supervisor
    SUPERVISOR_SCHEDULE: '*/30 * * * * *'
    MAX_FAILURES: '3'
    REVIEW_AMOUNT_THRESHOLD_CENTS: '100000'
    REVIEW_TIMEOUT_SECONDS: '86400'
    REVIEW_DEFAULT_ACTION: 'compensate'
    RETRY_BACKOFF_BASE_SECONDS: '10'
    RETRY_BACKOFF_MAX_SECONDS: '300'
    // many instances, their clocks within seconds: docs/supervisor.md, "Clocks" (local runs: 0)
    SUPERVISOR_GRACE_SECONDS: '15'
    SUPERVISOR_BACKEND_WAIT_SECONDS: '600'
    SUPERVISOR_MAX_RECORDS: '100'
    SUPERVISOR_PAGE_SIZE: '25'
    SUPERVISOR_WINDOW_MINUTES: '60'
    SUPERVISOR_CATCHUP_EVERY: '10'
    CIRCUIT_FAILURE_THRESHOLD: '8'
    CIRCUIT_COOLDOWN_SECONDS: '30'
    CIRCUIT_COOLDOWN_MAX_SECONDS: '240'
    CIRCUIT_PROBES: '1'
    CIRCUIT_HEALTH_CACHE_SECONDS: '5'
    MAX_OUTAGE_WAIT_MINUTES: '60'
    OUTAGE_SETTLE_SECONDS: '300'
    PAYMENT_WAIT_MINUTES: '60'
    // Deferral
    DEFER_RETRY_DELAY_SECONDS: '30'
    DEFER_MAX_ROUNDS: '3'
    PEEK_SWEEP_SCHEDULE: '0 */5 * * * *'
    PEEK_SWEEP_AGE_MINUTES: '10'
    PEEK_SWEEP_MAX_MESSAGES: '500'
    ORDERLESS_PAYMENT_ALERT_MINUTES: '120'
    // Durable history: finished instances purged after this many days (retention/; 0 = never)
    DURABLE_HISTORY_RETENTION_DAYS: '30'
  }, durableBackend == 'dts' ? durableTaskSchedulerSettings : {})
}

// App Service authentication (Easy Auth) with Microsoft Entra ID for the operator API and console
// (operations/). Anonymous requests pass to the app, which answers 401 itself (operations/auth.py):
// the platform validates sign-ins and tokens, strips any client-sent X-MS-CLIENT-PRINCIPAL and sets
// its own, and sets WEBSITE_AUTH_ENABLED=True, without which the app refuses every ops request.
// Sign-in uses the ID token (no client secret); a caller's roles come from the token's roles claim.
resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = if (!empty(opsAuthClientId)) {
  //checkov:skip=CKV_AZURE_13:This is the authsettingsV2 resource itself (App Service authentication on); checkov applies web-site config checks to every sites/config.
  //checkov:skip=CKV_AZURE_63:Not applicable to the authsettingsV2 resource (see CKV_AZURE_13); the app logs through Application Insights.
  //checkov:skip=CKV_AZURE_65:Not applicable to the authsettingsV2 resource (see CKV_AZURE_13).
  //checkov:skip=CKV_AZURE_66:Not applicable to the authsettingsV2 resource (see CKV_AZURE_13).
  //checkov:skip=CKV_AZURE_80:Not applicable: a Python app, and this is the authsettingsV2 resource.
  //checkov:skip=CKV_AZURE_88:Not applicable: Flex Consumption deploys from a blob container, not Azure Files.
  //checkov:skip=CKV_AZURE_222:Not applicable to the authsettingsV2 resource; see the same skip on the site.
  parent: site
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: false
      unauthenticatedClientAction: 'AllowAnonymous'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: opsAuthClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            opsAuthClientId
            'api://${opsAuthClientId}'
          ]
        }
      }
    }
    login: {
      // The app reads only the X-MS-CLIENT-PRINCIPAL header, which the platform sends without a token
      // store; a store without a blob container would keep tokens on an instance's file system, which
      // Flex Consumption instances do not share.
      tokenStore: {
        enabled: false
      }
    }
  }
}

output name string = site.name
output id string = site.id
output defaultHostName string = site.properties.defaultHostName
