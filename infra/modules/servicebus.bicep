// Service Bus namespace with every queue the code uses (contracts/names.py ALL_QUEUES; a test
// checks the two lists are the same). Entra ID only (disableLocalAuth), TLS 1.2 minimum.

param name string
param location string
param tags object

@description('Private networking: Premium (private endpoints need it) and no public endpoint.')
param vnetEnabled bool

// Every queue the app sends to or receives from. client-statuses is the example submitter's
// status queue (the StatusUpdate replyTo of orders it submits); a real submitter gets its own.
var queueNames = [
  'orders'
  'agent-replies'
  'operator-alerts'
  'payment-backup-requests'
  'payment-requests'
  'shipping-requests'
  'client-statuses'
]
var clientStatusQueueName = 'client-statuses'
var ordersQueueName = 'orders'
var operatorAlertsQueueName = 'operator-alerts'

// Queue policy, the same for every queue (contracts/names.py QUEUE_* constants; a test checks it).
// - lockDuration 1 minute: one delivery is handled well inside it (an agent request makes at most
//   AGENT_MAX_ATTEMPTS = 4 calls with 0.5 s, 1 s, 2 s backoff inside STEP_TIMEOUT_SECONDS = 60),
//   and the host renews the lock up to host.json maxAutoLockRenewalDuration (5 minutes); settings.py
//   refuses agent settings that would let one request take longer (agent_request_longest).
// - maxDeliveryCount 5: a handler that keeps failing is a poison message; after 5 deliveries it is
//   dead-lettered (and alerted on) instead of looping. The order itself is not lost: the
//   supervisor recovers it through its state record, MAX_FAILURES = 3 times with backoff.
// - duplicate detection 10 minutes: longer than every sender's retry window (the SDK retries a
//   send for seconds, an activity retry resends within the step deadline of 60 s), so a resent
//   message with the same MessageId is dropped by the broker.
// - defaultMessageTimeToLive 14 days (QUEUE_MESSAGE_TTL_DAYS): a message deferred that long has expired. Service
//   Bus dead-letters an expired deferred message only when a client tries to receive it by its sequence number
//   (https://learn.microsoft.com/azure/service-bus-messaging/message-deferral), which the peek sweep does; the
//   settings that wait on a deferred message stay under it (settings.py MESSAGE_TTL).
var standardSku = {
  name: 'Standard'
  tier: 'Standard'
}
var premiumSku = {
  name: 'Premium'
  tier: 'Premium'
  capacity: 1
}
var lockDuration = 'PT1M'
var maxDeliveryCount = 5
var duplicateDetectionWindow = 'PT10M'

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' = {
  name: name
  location: location
  tags: tags
  // Standard: duplicate detection needs Standard or Premium. Private endpoints need Premium, so
  // VNET_ENABLED switches to Premium with one messaging unit (a fixed hourly price instead of
  // Standard's per-operation price: docs/deploy.md).
  sku: vnetEnabled ? premiumSku : standardSku
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
  }
}

resource queues 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' = [for queueName in queueNames: {
  parent: namespace
  name: queueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: 'P14D'
    requiresSession: false
    enablePartitioning: false
    maxSizeInMegabytes: 1024
  }
}]

output name string = namespace.name
output id string = namespace.id
// Host name only, right in every cloud: https://<ns>.servicebus.windows.net:443/ -> <ns>.servicebus.windows.net
// (no '//' string literal: tree-sitter-bicep reads it as a comment).
output fullyQualifiedNamespace string = split(replace(replace(namespace.properties.serviceBusEndpoint, 'https:', ''), '/', ''), ':')[0]
output clientStatusQueueName string = clientStatusQueueName
output ordersQueueName string = ordersQueueName
output operatorAlertsQueueName string = operatorAlertsQueueName
