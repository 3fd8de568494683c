// Least-privilege data roles, each scoped to the one resource it is needed on:
// - the app identity: host + Durable storage, Service Bus Data Owner (the triggers' scale
//   decisions read queue runtime properties: Microsoft's identity-connection guidance for Service
//   Bus triggers lists Data Owner; it includes send and receive), Cosmos DB data, telemetry;
// - the deploying user (AZURE_PRINCIPAL_ID): the data roles a local `func start` needs (Service Bus
//   send + receive, no scaling), so runs against the provisioned resources work with `az login`
//   (scripts/postprovision.* writes the settings);
// - the example submitter: send on `orders` and receive on its own status queue, nothing else.
// Names are guid(scope, principal, role) so re-deploying is idempotent.

param appPrincipalId string

@description('Deploying user; empty skips the user assignments.')
param userPrincipalId string

param userPrincipalType string

@description('Example submitter; empty skips its assignments.')
param clientPrincipalId string

@description('Principal type of the example submitter (User, ServicePrincipal or Group).')
param clientPrincipalType string

param storageAccountName string
param serviceBusNamespaceName string
param clientStatusQueueName string
param ordersQueueName string
param cosmosAccountName string
param applicationInsightsName string

var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}
// Cosmos DB Built-in Data Contributor: a Cosmos DB SQL role, not an Azure RBAC role.
var cosmosDataContributorRoleId = '00000000-0000-0000-0000-000000000002'

var storageRoles = [
  roles.storageBlobDataOwner
  roles.storageQueueDataContributor
  roles.storageTableDataContributor
]
var userServiceBusRoles = [
  roles.serviceBusDataReceiver
  roles.serviceBusDataSender
]
var hasUser = !empty(userPrincipalId)
var hasClient = !empty(clientPrincipalId)

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource serviceBusNamespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusNamespaceName
}

resource clientStatusQueue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' existing = {
  parent: serviceBusNamespace
  name: clientStatusQueueName
}

resource ordersQueue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' existing = {
  parent: serviceBusNamespace
  name: ordersQueueName
}

resource cosmosAccount 'Microsoft.DocumentDB/databaseAccounts@2024-05-15' existing = {
  name: cosmosAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Storage: host (blobs: leases, timers, deployment package) and Durable (queues, tables, blobs).
resource appStorage 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in storageRoles: {
  name: guid(storageAccount.id, appPrincipalId, roleId)
  scope: storageAccount
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}]

resource userStorage 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in storageRoles: if (hasUser) {
  name: guid(storageAccount.id, userPrincipalId, roleId)
  scope: storageAccount
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}]

// Service Bus: the app receives (triggers, deferred messages) and sends (agent requests, replies,
// statuses, alerts) on the namespace's queues, including every submitter's status queue; the
// scale controller reads the queues' runtime properties (message counts) with the same identity.
resource appServiceBus 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(serviceBusNamespace.id, appPrincipalId, roles.serviceBusDataOwner)
  scope: serviceBusNamespace
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource userServiceBus 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for roleId in userServiceBusRoles: if (hasUser) {
  name: guid(serviceBusNamespace.id, userPrincipalId, roleId)
  scope: serviceBusNamespace
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}]

// The example submitter sends orders and reads its own statuses, nothing else: Sender on `orders`,
// Receiver on its status queue.
resource clientOrdersSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasClient) {
  name: guid(ordersQueue.id, clientPrincipalId, roles.serviceBusDataSender)
  scope: ordersQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: clientPrincipalId
    principalType: clientPrincipalType
  }
}

resource clientStatusReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasClient) {
  name: guid(clientStatusQueue.id, clientPrincipalId, roles.serviceBusDataReceiver)
  scope: clientStatusQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: clientPrincipalId
    principalType: clientPrincipalType
  }
}

// Telemetry: Application Insights has local auth off; the identity publishes metrics and logs.
resource appMetrics 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(applicationInsights.id, appPrincipalId, roles.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource userMetrics 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasUser) {
  name: guid(applicationInsights.id, userPrincipalId, roles.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

// Cosmos DB data plane: SQL role assignments on the account.
resource appCosmos 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-05-15' = {
  parent: cosmosAccount
  name: guid(cosmosAccount.id, appPrincipalId, cosmosDataContributorRoleId)
  properties: {
    roleDefinitionId: '${cosmosAccount.id}/sqlRoleDefinitions/${cosmosDataContributorRoleId}'
    principalId: appPrincipalId
    scope: cosmosAccount.id
  }
}

resource userCosmos 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-05-15' = if (hasUser) {
  parent: cosmosAccount
  name: guid(cosmosAccount.id, userPrincipalId, cosmosDataContributorRoleId)
  properties: {
    roleDefinitionId: '${cosmosAccount.id}/sqlRoleDefinitions/${cosmosDataContributorRoleId}'
    principalId: userPrincipalId
    scope: cosmosAccount.id
  }
}
