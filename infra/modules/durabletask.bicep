// Durable Task Scheduler backend (DURABLE_BACKEND=dts): a scheduler, the task hub the app uses
// (host.json hubName), and the data role for the app identity and the deploying user (the
// user's role also opens the scheduler's dashboard). Consumption SKU: billed per action, no
// capacity to size; switch to Dedicated (2,000 actions/s and 50 GB per capacity unit) for a
// steady high load (docs/deploy.md).

param name string
param location string
param tags object

@description('Task hub name: the durableTask hubName of host.json.')
param taskHubName string

param appPrincipalId string

@description('Deploying user; empty skips the user assignment.')
param userPrincipalId string

param userPrincipalType string

// Durable Task Data Contributor: run orchestrations, activities and entities, read history.
var durableTaskDataContributor = '0ad04412-c4d5-4796-b79c-f76d14c8d402'

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'Consumption'
    }
    // An empty list denies all traffic; the data role is the gate on the public endpoint. It stays
    // public with VNET_ENABLED too (this API version has no public network switch; docs/deploy.md).
    ipAllowlist: [
      '0.0.0.0/0'
    ]
  }
}

resource taskHub 'Microsoft.DurableTask/schedulers/taskHubs@2025-11-01' = {
  parent: scheduler
  name: taskHubName
  properties: {}
}

resource appDurableTask 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(scheduler.id, appPrincipalId, durableTaskDataContributor)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource userDurableTask 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(userPrincipalId)) {
  name: guid(scheduler.id, userPrincipalId, durableTaskDataContributor)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributor)
    principalId: userPrincipalId
    principalType: userPrincipalType
  }
}

output name string = scheduler.name
output id string = scheduler.id
output endpoint string = scheduler.properties.endpoint
output taskHubName string = taskHub.name
