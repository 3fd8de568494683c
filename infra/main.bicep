// Scheduler Agent Supervisor: everything `azd up` provisions.
// Subscription scope: creates the resource group, then one module per concern.
// Written without user-defined types or `import` so the offline checks (tree-sitter-bicep and
// checkov's older parser) can read every file; see tests/infra/.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the azd environment; used to make resource names unique.')
param environmentName string

// Regions that offer Flex Consumption (the official azd Flex Consumption templates' list). A region
// outside it fails here, at parameter validation, instead of late at plan creation; the
// preprovision hook (scripts/preprovision.*) also asks Azure whether the region offers the app's
// Python version on Flex Consumption right now.
@minLength(1)
@description('Region of every resource (must offer Flex Consumption).')
@allowed([
  'australiaeast'
  'australiasoutheast'
  'brazilsouth'
  'canadacentral'
  'centralindia'
  'centralus'
  'eastasia'
  'eastus'
  'eastus2'
  'francecentral'
  'germanywestcentral'
  'italynorth'
  'japaneast'
  'koreacentral'
  'northcentralus'
  'northeurope'
  'norwayeast'
  'southafricanorth'
  'southcentralus'
  'southeastasia'
  'southindia'
  'spaincentral'
  'swedencentral'
  'uaenorth'
  'uksouth'
  'ukwest'
  'westcentralus'
  'westeurope'
  'westus'
  'westus2'
  'westus3'
])
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object id of the deploying user (AZURE_PRINCIPAL_ID): gets the same data roles as the app so local runs against Azure work. Empty: no user roles.')
param principalId string = ''

@description('Principal type of principalId: User for a developer, ServicePrincipal for a pipeline.')
@allowed([
  'User'
  'ServicePrincipal'
  'Group'
])
param principalType string = 'User'

@description('Object id of the example submitter (client): it may send to orders and receive from its own status queue, nothing else. Empty: no assignment.')
param clientPrincipalId string = ''

@description('Principal type of clientPrincipalId: ServicePrincipal for an app or managed identity, User for a person.')
@allowed([
  'User'
  'ServicePrincipal'
  'Group'
])
param clientPrincipalType string = 'ServicePrincipal'

@description('Email address that receives operator alerts. Empty: the action group has no receivers.')
param alertEmail string = ''

@description('Cosmos DB capacity mode: serverless (true) or provisioned throughput (false).')
param cosmosServerless bool = true

@description('Shared database throughput (RU/s) when cosmosServerless is false.')
@minValue(400)
param cosmosThroughput int = 400

@description('Cosmos DB database name (app setting COSMOS_DATABASE).')
param cosmosDatabaseName string = 'scheduler'

@description('Flex Consumption: maximum number of instances.')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('Flex Consumption: memory of each instance in MB (512, 2048 or 4096; 2048 is the platform default; 512 costs a quarter per second if the app fits in it).')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('VNET_ENABLED: private networking (VNet integration, private endpoints, no public data endpoints; Service Bus becomes Premium). Off by default.')
param vnetEnabled bool = false

@description('DURABLE_BACKEND: storage (Azure Storage, the default) or dts (Durable Task Scheduler).')
@allowed([
  'storage'
  'dts'
])
param durableBackend string = 'storage'

@description('OPS_AUTH_CLIENT_ID: the Entra ID app registration operators sign in to (docs/deploy.md#operators-sign-in-app-roles-the-console-and-the-workbook); empty: the ops API refuses every request.')
param opsAuthClientId string = ''

@description('Durable task hub name; must equal durableTask.hubName in host.json (a test checks it).')
param taskHubName string = 'OrdersTaskHub'

var abbrs = loadJsonContent('./abbreviations.json')
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
var functionAppName = '${abbrs.webSitesFunctions}api-${resourceToken}'
var deploymentContainerName = 'app-package-${take(functionAppName, 32)}-${take(resourceToken, 7)}'

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: '${abbrs.resourcesResourceGroups}${environmentName}'
  location: location
  tags: tags
}

// The one identity the app uses for every connection (storage, Service Bus, Cosmos DB, telemetry).
module appIdentity 'br/public:avm/res/managed-identity/user-assigned-identity:0.4.1' = {
  name: 'appIdentity'
  scope: rg
  params: {
    name: '${abbrs.managedIdentityUserAssignedIdentities}api-${resourceToken}'
    location: location
    tags: tags
  }
}

module logAnalytics 'br/public:avm/res/operational-insights/workspace:0.11.1' = {
  name: 'logAnalytics'
  scope: rg
  params: {
    name: '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    location: location
    tags: tags
    dataRetention: 30
  }
}

module appInsights 'br/public:avm/res/insights/component:0.6.0' = {
  name: 'appInsights'
  scope: rg
  params: {
    name: '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
    workspaceResourceId: logAnalytics.outputs.resourceId
    // Telemetry is accepted only with Entra ID tokens: the app sends with its identity.
    disableLocalAuth: true
  }
}

module storage './modules/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: '${abbrs.storageStorageAccounts}${resourceToken}'
    location: location
    tags: tags
    deploymentContainerName: deploymentContainerName
    vnetEnabled: vnetEnabled
  }
}

module serviceBus './modules/servicebus.bicep' = {
  name: 'serviceBus'
  scope: rg
  params: {
    name: '${abbrs.serviceBusNamespaces}${resourceToken}'
    location: location
    tags: tags
    vnetEnabled: vnetEnabled
  }
}

module cosmos './modules/cosmos.bicep' = {
  name: 'cosmos'
  scope: rg
  params: {
    name: '${abbrs.documentDBDatabaseAccounts}${resourceToken}'
    location: location
    tags: tags
    databaseName: cosmosDatabaseName
    serverless: cosmosServerless
    throughput: cosmosThroughput
    vnetEnabled: vnetEnabled
  }
}

module network './modules/network.bicep' = if (vnetEnabled) {
  name: 'network'
  scope: rg
  params: {
    vnetName: '${abbrs.networkVirtualNetworks}${resourceToken}'
    location: location
    tags: tags
    storageAccountId: storage.outputs.id
    serviceBusNamespaceId: serviceBus.outputs.id
    cosmosAccountId: cosmos.outputs.id
  }
}

module durableTask './modules/durabletask.bicep' = if (durableBackend == 'dts') {
  name: 'durableTask'
  scope: rg
  params: {
    name: '${abbrs.durableTaskSchedulers}${resourceToken}'
    location: location
    tags: tags
    taskHubName: taskHubName
    appPrincipalId: appIdentity.outputs.principalId
    userPrincipalId: principalId
    userPrincipalType: principalType
  }
}

module functionApp './modules/functionapp.bicep' = {
  name: 'functionApp'
  scope: rg
  params: {
    name: functionAppName
    planName: '${abbrs.webServerFarms}${resourceToken}'
    location: location
    tags: tags
    identityId: appIdentity.outputs.resourceId
    identityClientId: appIdentity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    applicationInsightsName: appInsights.outputs.name
    serviceBusNamespaceFqdn: serviceBus.outputs.fullyQualifiedNamespace
    cosmosEndpoint: cosmos.outputs.endpoint
    cosmosDatabaseName: cosmos.outputs.databaseName
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    durableBackend: durableBackend
    durableTaskSchedulerEndpoint: durableBackend == 'dts' ? durableTask.outputs.endpoint : ''
    appSubnetId: vnetEnabled ? network.outputs.appSubnetId : ''
    opsAuthClientId: opsAuthClientId
  }
}

// The operators' Azure Monitor workbook, on the app's structured events in the workspace.
module workbook './modules/workbook.bicep' = {
  name: 'workbook'
  scope: rg
  dependsOn: [
    appInsights
  ]
  params: {
    location: location
    tags: tags
    logAnalyticsWorkspaceId: logAnalytics.outputs.resourceId
  }
}

module rbac './modules/rbac.bicep' = {
  name: 'rbac'
  scope: rg
  params: {
    appPrincipalId: appIdentity.outputs.principalId
    userPrincipalId: principalId
    userPrincipalType: principalType
    clientPrincipalId: clientPrincipalId
    clientPrincipalType: clientPrincipalType
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
    clientStatusQueueName: serviceBus.outputs.clientStatusQueueName
    ordersQueueName: serviceBus.outputs.ordersQueueName
    cosmosAccountName: cosmos.outputs.name
    applicationInsightsName: appInsights.outputs.name
  }
}

module alerts './modules/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  // The log alert queries the App Insights tables in the workspace: create it after the link.
  dependsOn: [
    appInsights
  ]
  params: {
    namePrefix: resourceToken
    location: location
    tags: tags
    alertEmail: alertEmail
    logAnalyticsWorkspaceId: logAnalytics.outputs.resourceId
  }
}

// Logs and metrics of every resource to the workspace (categories chosen: see the module).
module diagnostics './modules/diagnostics.bicep' = {
  name: 'diagnostics'
  scope: rg
  params: {
    logAnalyticsWorkspaceId: logAnalytics.outputs.resourceId
    serviceBusNamespaceName: serviceBus.outputs.name
    cosmosAccountName: cosmos.outputs.name
    storageAccountName: storage.outputs.name
    functionAppName: functionApp.outputs.name
  }
}

// azd stores these in the environment (.azure/<env>/.env); scripts/postprovision.* reads them.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
// The official azd Flex Consumption templates' names: AZURE_LOCATION, AZURE_TENANT_ID,
// SERVICE_API_NAME, AZURE_FUNCTION_NAME (AZURE_FUNCTION_APP_NAME kept for earlier environments).
output AZURE_FUNCTION_NAME string = functionApp.outputs.name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output SERVICE_API_NAME string = functionApp.outputs.name
output SERVICEBUS_FULLY_QUALIFIED_NAMESPACE string = serviceBus.outputs.fullyQualifiedNamespace
output SERVICEBUS_NAMESPACE_NAME string = serviceBus.outputs.name
output COSMOS_ENDPOINT string = cosmos.outputs.endpoint
output COSMOS_DATABASE string = cosmos.outputs.databaseName
output COSMOS_ACCOUNT_NAME string = cosmos.outputs.name
output AZURE_STORAGE_ACCOUNT_NAME string = storage.outputs.name
output APPLICATIONINSIGHTS_NAME string = appInsights.outputs.name
// Durable Task Scheduler (DURABLE_BACKEND=dts; empty otherwise): the dashboard is at
// https://dashboard.durabletask.io with this endpoint and task hub.
output DURABLE_TASK_SCHEDULER_ENDPOINT string = durableBackend == 'dts' ? durableTask.outputs.endpoint : ''
output TASKHUB_NAME string = taskHubName
output OPS_CONSOLE_URL string = 'https://${functionApp.outputs.defaultHostName}/api/ops/console'
