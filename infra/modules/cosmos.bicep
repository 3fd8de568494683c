// Cosmos DB (NoSQL): the order database (`orders`) and the scheduler's state store (`state`),
// both partitioned by /orderId (contracts/names.py; a test checks it). Entra ID only.

param name string
param location string
param tags object

@description('Database name (app setting COSMOS_DATABASE).')
param databaseName string

@description('Serverless (true) or provisioned throughput (false).')
param serverless bool

@description('Shared database throughput in RU/s when not serverless.')
param throughput int

@description('Private networking: no public endpoint; the app connects through a private endpoint (network.bicep).')
param vnetEnabled bool

var partitionKeyPath = '/orderId'
var serverlessCapabilities = [
  {
    name: 'EnableServerless'
  }
]
var provisionedOptions = {
  throughput: throughput
}

resource account 'Microsoft.DocumentDB/databaseAccounts@2024-05-15' = {
  //checkov:skip=CKV_AZURE_99:The Flex Consumption app connects over the public endpoint (no VNet by default); local auth is off, so only principals with a Cosmos SQL role assignment get in.
  //checkov:skip=CKV_AZURE_101:Same as CKV_AZURE_99: public network access is needed without a private endpoint; keys are disabled.
  name: name
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    capabilities: serverless ? serverlessCapabilities : []
    // Keys are off: the app and the deploying user use Cosmos DB SQL role assignments (rbac.bicep).
    disableLocalAuth: true
    disableKeyBasedMetadataWriteAccess: true
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
    enableAutomaticFailover: false
    enableFreeTier: false
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-05-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
    options: serverless ? {} : provisionedOptions
  }
}

// The order itself: written once at intake, read by id. Order lines are never queried.
resource ordersContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-05-15' = {
  parent: database
  name: 'orders'
  properties: {
    resource: {
      id: 'orders'
      partitionKey: {
        paths: [
          partitionKeyPath
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/*'
          }
        ]
        excludedPaths: [
          {
            path: '/lines/*'
          }
          {
            path: '/"_etag"/?'
          }
        ]
      }
    }
  }
}

// One state record per order. The queries that are paged go by keyset (each page a fresh
// SELECT TOP ... after the last row, ORDER BY <key>, c.id: no continuation token, which the SDK
// cannot resume a cross-partition ORDER BY from), and every ORDER BY on more than one property
// needs its composite index (a 400 without it), the equality-filtered processState first
// (https://learn.microsoft.com/azure/cosmos-db/index-policy#composite-indexes):
//   supervisor scans  WHERE c.processState = @state AND c.completeBy <= @now ...
//                     ORDER BY c.processState, c.completeBy, c.id
//   ops list, a state WHERE c.processState = @state ORDER BY c.processState DESC, c.updatedAt DESC, c.id DESC
//   ops list, all     WHERE IS_DEFINED(c.processState) ORDER BY c.updatedAt DESC, c.id DESC
// (processState ASC, completeBy ASC) serves the scans' and the starter's filters. The same list is
// adapters/cosmos/client.py STATE_COMPOSITE_INDEXES (the local server's); tests/infra checks both.
// Bulky per-step detail is never filtered on: not indexed.
// Time to live on, with no default (defaultTtl -1, contracts/names.py STATE_DEFAULT_TTL): only a document with a
// ttl of its own expires, the alert marks (domain/alert_marks.py, a day and two hours after their last write);
// state records, deferral documents, dependency health and cursors carry none and stay. Without defaultTtl an item's
// ttl is ignored (https://learn.microsoft.com/azure/cosmos-db/time-to-live). Setting it on the existing container is
// an in-place update of its properties (as the portal's Time to Live setting): no item is rewritten or lost.
resource stateContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-05-15' = {
  parent: database
  name: 'state'
  properties: {
    resource: {
      id: 'state'
      defaultTtl: -1
      partitionKey: {
        paths: [
          partitionKeyPath
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/*'
          }
        ]
        excludedPaths: [
          {
            path: '/history/*'
          }
          {
            path: '/steps/*'
          }
          {
            path: '/compensation/*'
          }
          {
            path: '/"_etag"/?'
          }
        ]
        compositeIndexes: [
          [
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/completeBy'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/completeBy'
              order: 'ascending'
            }
            {
              path: '/id'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/processState'
              order: 'descending'
            }
            {
              path: '/updatedAt'
              order: 'descending'
            }
            {
              path: '/id'
              order: 'descending'
            }
          ]
          [
            {
              path: '/updatedAt'
              order: 'descending'
            }
            {
              path: '/id'
              order: 'descending'
            }
          ]
        ]
      }
    }
  }
}

output name string = account.name
output id string = account.id
output endpoint string = account.properties.documentEndpoint
output databaseName string = database.name
