// Storage for the Functions host and Durable Functions (Azure Storage backend: blobs, queues,
// tables), plus the blob container Flex Consumption deploys the app package from.
// Identity only: shared keys are off, so every client (host, Durable, azd deploy) uses Entra ID.

@description('Storage account name (3-24 lowercase letters and digits).')
param name string

param location string
param tags object

@description('Blob container the Flex Consumption app is deployed from.')
param deploymentContainerName string

@description('Private networking: no public endpoint; the app reaches blob, queue and table through private endpoints (network.bicep).')
param vnetEnabled bool

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  //checkov:skip=CKV_AZURE_35:The Flex Consumption app reaches storage over its public endpoint (no VNet by default); access is Entra ID only, shared keys are off.
  //checkov:skip=CKV_AZURE_59:Public endpoint needed without a VNet; anonymous access (allowBlobPublicAccess) and shared keys are off, so only Entra ID principals with a role get in.
  //checkov:skip=CKV_AZURE_206:Host and Durable state is transient (leases, control queues, history of in-flight orders); Standard_LRS is the cost default, choose ZRS/GRS per environment.
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
    networkAcls: {
      defaultAction: vnetEnabled ? 'Deny' : 'Allow'
      bypass: vnetEnabled ? 'None' : 'AzureServices'
    }
    encryption: {
      keySource: 'Microsoft.Storage'
      requireInfrastructureEncryption: true
      services: {
        blob: {
          enabled: true
        }
        file: {
          enabled: true
        }
        queue: {
          enabled: true
          keyType: 'Account'
        }
        table: {
          enabled: true
          keyType: 'Account'
        }
      }
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

output name string = account.name
output id string = account.id
output blobEndpoint string = account.properties.primaryEndpoints.blob
