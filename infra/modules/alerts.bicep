// Operator alerting: one action group (email) and seven log search alert rules.
// - the app raised an OperatorAlert (log search on its OperatorAlert events, notifications/alerts.py: one per alert).
//   Not the operator-alerts queue's IncomingMessages metric: one time series, so a steady stream of alerts kept its
//   stateful alert fired and the operator had one email for all of them;
// - an order moved to Error or CompensationFailed (log search on the app's StateTransition
//   events: observability/events.py logs them with customDimensions event/toState);
// - the supervisor is failing: a phase of a run failed (SupervisorPhaseFailed, supervisor/run.py) or a
//   state document that does not map was skipped (UnmappedDocument, adapters/cosmos/state_store.py):
//   both let the run go on, so without this rule they would only be log lines;
// - a message arrived in an app queue's dead-letter subqueue (log search on the supervisor's DeadLetterFound events,
//   supervisor/dead_letters.py: one per dead letter, the broker's too; one alert per queue and reason). Not the DeadletteredMessages metric: it counts
//   the messages WAITING there, so its stateful alert stayed fired while an old dead letter waited and a new one paged
//   nobody;
// - an operator alert the alert courier gave up on, or one neither sent nor handed to it that no redelivery
//   raises again (AlertUndelivered, notifications/alerts.py), or the
//   StatusUndelivered alert of a final status given up whose own send failed (AlertSendFailed): neither
//   reached operator-alerts;
// - Cosmos DB refusing the app's identity in each of five 5-minute periods in a row (log search on the
//   StoreRequestRefused events every refused request logs, adapters/cosmos/errors.py): a role removed, a Data Reader
//   role, the firewall; not a role still propagating. Not the supervisor's memory of its refused scans: a host
//   restart started its 20 minutes again, and writes refused while reads were answered never paged;
// - the Durable backend failing the app's calls (starts, raises, status reads, terminations) in each of three 5-minute
//   periods in a row (durableBackendFailing): the task hub's storage throttled or down, the Durable Task Scheduler
//   broken. Before, a long outage showed only as orders going to Error 10 minutes in, each paged by ordersFailed
//   without its cause; a blip of seconds pages nobody (tests/observability/test_durable_backend_alert.py).
// The log search rules are stateful (autoMitigate unset: true): an alert fires once, then nothing it sees
// pages again until its condition has been unmet for three evaluations (two at PT15M; Microsoft Learn, Azure Monitor
// alerts overview, "Alerts and state"). Each is split by dimensions (orderId, and the alert kind or the phase; an
// operator alert's id; a dead letter's queue and reason), so each is one alert per
// order (per operator alert, per queue and reason of the dead letters arriving): a second order failing while
// the first's alert is fired pages too, and one order's repeated events page once (tests/observability/test_alert_rules_page_each_order.py). Stateful log alerts fire at
// most 300 alerts per evaluation, and an action group sends at most 100 emails an hour to one address: a mass failure
// shows every order in the portal's alert list, not every one by email.

@description('Unique suffix for alert names.')
param namePrefix string

param location string
param tags object

@description('Receiver of the alerts; empty: the action group has no receivers.')
param alertEmail string

param logAnalyticsWorkspaceId string

var operatorEmail = [
  {
    name: 'operator'
    emailAddress: alertEmail
    useCommonAlertSchema: true
  }
]
var emailReceivers = empty(alertEmail) ? [] : operatorEmail

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = {
  name: 'ag-operators-${namePrefix}'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'operators'
    enabled: true
    emailReceivers: emailReceivers
  }
}

resource operatorAlertRaised 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-operator-alert-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Operator alert raised'
    description: 'The app raised an OperatorAlert (sent to the operator-alerts queue, or handed to the alert courier when the send failed): an order, or a dependency, needs a person. Read the alertKind, orderId and alertId fields of the event and the message on operator-alerts.'
    severity: 1
    enabled: true
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    // As ordersFailed: AppTraces may not exist yet when this is created.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // one alert per operator alert (its id: its kind, order and discriminator), not one for the queue: a steady
          // stream of alerts pages each; the same alert raised again (a redelivery) pages once
          query: 'AppTraces | where tostring(Properties.event) == "OperatorAlert" | extend alertKind = tostring(Properties.alertKind), orderId = coalesce(tostring(Properties.orderId), "-"), alertId = tostring(Properties.alertId)'
          dimensions: [
            {
              name: 'alertKind'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'orderId'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'alertId'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource deadLettersFound 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-dead-letters-found-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'New dead letter on an app queue'
    description: 'A message arrived in an app queue\'s dead-letter subqueue (DeadLetterFound, supervisor/dead_letters.py: the app\'s own dead-lettering or the broker\'s, MaxDeliveryCountExceeded or TTLExpiredException). One alert per queue and reason while new ones keep coming (a burst or a trickle is one page): read the queue, sequenceNumber, reason, description and orderId fields of its events since the alert fired, then the message in <queue>/$deadletterqueue: resubmit or discard it.'
    severity: 2
    enabled: true
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    // As ordersFailed: AppTraces may not exist yet when this is created.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // one alert per queue and dead-letter reason while new ones keep coming (stateful: resolved after three
          // evaluations without a new one), whatever waits there already: a burst is one page, not one per message
          // (the action group's 100 emails an hour were every rule's; 300 alerts an evaluation at most), and so is
          // a trickle (one per watch run, the firstNew dimension, paged every run: 100 pages for one dead letter a
          // minute for 200 minutes); another reason (the broker's MaxDeliveryCountExceeded beside the app's
          // InvalidFields), another queue, or the same after 15 quiet minutes pages again; a watch that logs one
          // twice (a run that died before its write) pages once
          query: 'AppTraces | where tostring(Properties.event) == "DeadLetterFound" | extend queue = tostring(Properties.queue), reason = coalesce(tostring(Properties.reason), "-")'
          dimensions: [
            {
              name: 'queue'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'reason'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource ordersFailed 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-orders-failed-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Orders in Error or CompensationFailed'
    description: 'An order moved to Error (retries exhausted or non-transient failure) or CompensationFailed (an operator must act).'
    severity: 1
    enabled: true
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    // AppTraces appears in a new workspace only when the app first logs: without this the rule
    // fails at creation ("failed to resolve table"). main.bicep also deploys this module after
    // Application Insights (dependsOn), so the workspace link exists first.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // StateWriteUnconfirmed too: a move whose answer was lost and whose read-back failed; Durable's next run of
          // its activity finds it made and logs nothing more (docs/observability.md). A move INTO the state only: a
          // failed order's side notes (Error -> Error: NotificationsDelivered, OwedAlertSent, OwedStatusSent), up to
          // hours later, are not a new failure. One alert per order, state and attempt (dimensions, see the header): a
          // lost answer's StateWriteUnconfirmed and its StateTransition page once; the order failing again after an
          // operator resubmitted it (the next attempt) or its compensation failing pages again.
          query: 'AppTraces | where tostring(Properties.event) in ("StateTransition", "StateWriteUnconfirmed") and tostring(Properties.toState) in ("Error", "CompensationFailed") and tostring(Properties.fromState) != tostring(Properties.toState) | extend orderId = coalesce(tostring(Properties.orderId), "-"), toState = tostring(Properties.toState), attempt = coalesce(tostring(Properties.attempt), "-")'
          dimensions: [
            {
              name: 'orderId'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'toState'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'attempt'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource supervisorFailing 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-supervisor-failing-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Supervisor phase failed or state document skipped'
    description: 'A supervisor run failed a phase (SupervisorPhaseFailed) or skipped state documents that do not map (UnmappedDocument, one alert per query and signature: the documents broken the same way): expired attempts, compensations or owed notifications may not be handled. Read the phase, query, signature, orderId and error fields of the events.'
    severity: 2
    enabled: true
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    // As ordersFailed: AppTraces may not exist yet when this is created.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // one alert per event, phase and subject: a phase failing every run pages once; a skipped document's phase
          // is its query and its subject how it is broken (signature, adapters/cosmos/state_store.py), not its id: a
          // second document broken another way pages too, a mass schema drift (5,000 documents broken the same way)
          // pages once, not once per document (each is still logged, with its orderId)
          query: 'AppTraces | where tostring(Properties.event) in ("SupervisorPhaseFailed", "UnmappedDocument") | extend eventName = tostring(Properties.event), phase = coalesce(tostring(Properties.phase), tostring(Properties.query), "-"), subject = coalesce(tostring(Properties.signature), tostring(Properties.orderId), "-")'
          dimensions: [
            {
              name: 'eventName'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'phase'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'subject'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource alertsUndelivered 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-alerts-undelivered-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Operator alert or final status given up'
    description: 'An operator alert the alert courier gave up on after about six hours of failed sends, or one the orders trigger could neither send nor hand to the courier (AlertUndelivered: it never reached operator-alerts), or a final status given up whose StatusUndelivered alert could not be sent either (AlertSendFailed with alertKind StatusUndelivered), or a final status or alert whose last try failed on every repeat without running its give-up (LastTryLost: killed at functionTimeout, a worker crash; neither sent nor alerted). Read the alertKind, orderId and summary fields of the events.'
    severity: 1
    enabled: true
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    // As ordersFailed: AppTraces may not exist yet when this is created.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // one alert per operator alert given up (its kind and order)
          query: 'AppTraces | where tostring(Properties.event) in ("AlertUndelivered", "LastTryLost") or (tostring(Properties.event) == "AlertSendFailed" and tostring(Properties.alertKind) == "StatusUndelivered") | extend alertKind = tostring(Properties.alertKind), orderId = coalesce(tostring(Properties.orderId), "-")'
          dimensions: [
            {
              name: 'alertKind'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'orderId'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource storeAccessRefused 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-store-access-refused-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Cosmos DB refusing the app\'s identity for 20 minutes'
    description: 'Cosmos DB has refused the app\'s identity (StoreRequestRefused: a 403 with substatus 5301, the principal has no data role; a 403 without one, the account firewall; a 401, a token it does not take) in each of the last five 5-minute periods: past a role assignment\'s propagation (up to about 10 minutes) and the firewall\'s (15). The role was removed, or is Cosmos DB Built-in Data Reader (reads answered, writes refused), or the network rules shut the app out. Orders wait (sent to orders again for later), then are dead-lettered after about an hour. Read the status and substatus fields of the events; give the app\'s identity its role back (infra/modules/rbac.bicep: azd provision). docs/deploy.md, First deploy, 403s.'
    severity: 1
    enabled: true
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    // As ordersFailed: AppTraces may not exist yet when this is created.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // Every refused request is logged where it is met (adapters/cosmos/errors.py: the supervisor's scans every
          // 30 seconds, the orders waiting, the activities, the ops API), by whichever process: Application Insights
          // keeps them across host restarts and counts two supervisors' once. Refused in each of five periods in a row
          // (20 to 25 minutes): a role still propagating (up to 10) pages nobody. One alert, no dimensions: stateful,
          // it stays fired while the refusals go on and is resolved 15 minutes after they stop.
          query: 'AppTraces | where tostring(Properties.event) == "StoreRequestRefused"'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 5
            minFailingPeriodsToAlert: 5
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource durableBackendFailing 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-durable-backend-failing-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Durable backend failing for 10 minutes'
    description: 'The Durable Functions extension\'s HTTP API has failed the app\'s calls in each of the last three 5-minute periods: starts (StartFailed with durableCall start, CompensationStartFailed), replies not raised (ReplyRetryScheduled, ReplyLeftToDeadline), instance statuses unread (SupervisorStatusUnread), terminations (SupervisorTerminateFailed), calls left for a stalled extension (DurablePhaseStopped). Not the starter\'s StartReleased / CompensationStartReleased: a claim whose start a run never tried, its time for starts spent, released at once (Pending again, a compensation round due again, nothing counted); no Durable call was made for it, and the run that left it logged DurablePhaseStopped, counted here (a claim whose release could not be written is a StartFailed or CompensationStartFailed, counted too). Orders are being retried meanwhile (a start that failed is released by the supervisor, a reply sent again in rounds, then left to its deadline), but those still failing when their retries run out go to Error, each paged by ordersFailed. Look at the task hub\'s storage account (throttling: its Availability and SuccessE2ELatency metrics, its firewall, the app\'s role on it, AzureWebJobsStorage) or the Durable Task Scheduler, and at the Durable extension\'s own logs (the host\'s traces of category DurableTask.*, Host.Triggers.DurableTask) and the error field of the events.'
    severity: 1
    enabled: true
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    // As ordersFailed: AppTraces may not exist yet when this is created.
    skipQueryValidation: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    criteria: {
      allOf: [
        {
          // The events a Durable call that failed NOW logs, whoever made it (the starter, the supervisor, the reply
          // relay, by any host: Application Insights keeps them across restarts). Not the supervisor's later
          // SupervisorStartMissed / SupervisorCompensationStartMissed (answers of the backend, a 404, minutes after a
          // start failed: one blip's echoes would reach periods it never touched), a StartFailed of a claim the store
          // refused (no durableCall), nor StartReleased / CompensationStartReleased (claims never tried, no Durable
          // call made: their run logged DurablePhaseStopped). Failing in each of three 5-minute periods in a row: a
          // blip of up to five minutes touches two at most, paging nobody; an outage pages once, 10 to 15 minutes in,
          // about when its first orders would go to Error. One alert, no dimensions: stateful, fired while the failures
          // go on, resolved 15 minutes after they stop. A flapping task hub (failures each minute) pages too.
          query: 'AppTraces | where tostring(Properties.event) in ("CompensationStartFailed", "DurablePhaseStopped", "ReplyLeftToDeadline", "ReplyRetryScheduled", "SupervisorStatusUnread", "SupervisorTerminateFailed") or (tostring(Properties.event) == "StartFailed" and tostring(Properties.durableCall) == "start")'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 3
            minFailingPeriodsToAlert: 3
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}
