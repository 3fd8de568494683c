// Private networking (VNET_ENABLED=true): a VNet with a subnet for the app's VNet integration
// (delegated to Microsoft.App/environments, as Flex Consumption requires) and one for private
// endpoints; private endpoints and private DNS zones for Storage (blob, queue, table), Service Bus
// (Premium only) and Cosmos DB. The data services turn public network access off (their modules).
// Layout as in the official Flex Consumption azd templates: 10.0.0.0/16, /24 subnets.

param vnetName string
param location string
param tags object

param storageAccountId string
param serviceBusNamespaceId string
param cosmosAccountId string

var appSubnetName = 'app'
var privateEndpointSubnetName = 'private-endpoints'

// One entry per private endpoint: the target, its sub-resource (group id) and its DNS zone.
var storageSuffix = environment().suffixes.storage
var endpoints = [
  {
    name: 'blob'
    target: storageAccountId
    groupId: 'blob'
    zone: 'privatelink.blob.${storageSuffix}'
  }
  {
    name: 'queue'
    target: storageAccountId
    groupId: 'queue'
    zone: 'privatelink.queue.${storageSuffix}'
  }
  {
    name: 'table'
    target: storageAccountId
    groupId: 'table'
    zone: 'privatelink.table.${storageSuffix}'
  }
  {
    name: 'servicebus'
    target: serviceBusNamespaceId
    groupId: 'namespace'
    zone: 'privatelink.servicebus.windows.net'
  }
  {
    name: 'cosmos'
    target: cosmosAccountId
    groupId: 'Sql'
    zone: 'privatelink.documents.azure.com'
  }
]

resource vnet 'Microsoft.Network/virtualNetworks@2024-05-01' = {
  name: vnetName
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        '10.0.0.0/16'
      ]
    }
    subnets: [
      {
        name: privateEndpointSubnetName
        properties: {
          addressPrefix: '10.0.1.0/24'
          privateEndpointNetworkPolicies: 'Disabled'
        }
      }
      {
        name: appSubnetName
        properties: {
          addressPrefix: '10.0.2.0/24'
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
        }
      }
    ]
  }
}

resource privateEndpointSubnet 'Microsoft.Network/virtualNetworks/subnets@2024-05-01' existing = {
  parent: vnet
  name: privateEndpointSubnetName
}

resource appSubnet 'Microsoft.Network/virtualNetworks/subnets@2024-05-01' existing = {
  parent: vnet
  name: appSubnetName
}

resource zones 'Microsoft.Network/privateDnsZones@2024-06-01' = [for endpoint in endpoints: {
  name: endpoint.zone
  location: 'global'
  tags: tags
}]

resource zoneLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [for (endpoint, i) in endpoints: {
  parent: zones[i]
  name: '${vnetName}-link'
  location: 'global'
  tags: tags
  properties: {
    registrationEnabled: false
    virtualNetwork: {
      id: vnet.id
    }
  }
}]

resource privateEndpoints 'Microsoft.Network/privateEndpoints@2024-05-01' = [for endpoint in endpoints: {
  name: 'pe-${endpoint.name}-${uniqueString(endpoint.target)}'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: privateEndpointSubnet.id
    }
    privateLinkServiceConnections: [
      {
        name: endpoint.name
        properties: {
          privateLinkServiceId: endpoint.target
          groupIds: [
            endpoint.groupId
          ]
        }
      }
    ]
  }
}]

resource dnsZoneGroups 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = [for (endpoint, i) in endpoints: {
  parent: privateEndpoints[i]
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: endpoint.name
        properties: {
          privateDnsZoneId: zones[i].id
        }
      }
    ]
  }
}]

output vnetName string = vnet.name
output appSubnetId string = appSubnet.id
output privateEndpointSubnetId string = privateEndpointSubnet.id
