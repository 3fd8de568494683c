// Operator alerting: one action group (email) and five alert rules.
// - an OperatorAlert message arrived on the operator-alerts queue (Service Bus metric);
// - an order moved to Error or CompensationFailed (log search on the app's StateTransition
//   events: observability/events.py logs them with customDimensions event/toState);
// - the supervisor is failing: a phase of a run failed (SupervisorPhaseFailed, supervisor/run.py) or a
//   state document that does not map was skipped (UnmappedDocument, adapters/cosmos/state_store.py):
//   both let the run go on, so without this rule they would only be log lines;
// - any queue dead-lettered a message (Service Bus metric);
// - an operator alert the alert courier gave up on, or one neither sent nor handed to it that no redelivery
//   raises again (AlertUndelivered, notifications/alerts.py), or the
//   StatusUndelivered alert of a final status given up whose own send failed (AlertSendFailed): neither
//   reached operator-alerts, so the first rule cannot see them.
// The three log search rules are stateful (autoMitigate unset: true): an alert fires once, then nothing it sees
// pages again until its condition has been unmet for three evaluations (two at PT15M; Microsoft Learn, Azure Monitor
// alerts overview, "Alerts and state"). Each is split by dimensions (orderId, and the alert kind or the phase), so
// each is one alert per order: a second order failing while the first's alert is fired pages too, and one order's
// repeated events page once (tests/observability/test_alert_rules_page_each_order.py). Stateful log alerts fire at
// most 300 alerts per evaluation, and an action group sends at most 100 emails an hour to one address: a mass failure
// shows every order in the portal's alert list, not every one by email.

@description('Unique suffix for alert names.')
param namePrefix string

param location string
param tags object

@description('Receiver of the alerts; empty: the action group has no receivers.')
param alertEmail string

param serviceBusNamespaceId string
param operatorAlertsQueueName string
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

resource operatorAlertQueued 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: 'ma-operator-alert-${namePrefix}'
  location: 'global'
  tags: tags
  properties: {
    description: 'An OperatorAlert was sent to the operator-alerts queue: an order needs a person.'
    severity: 1
    enabled: true
    scopes: [
      serviceBusNamespaceId
    ]
    evaluationFrequency: 'PT1M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'OperatorAlertsIncoming'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'IncomingMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                operatorAlertsQueueName
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Total'
        }
      ]
    }
    actions: [
      {
        actionGroupId: actionGroup.id
      }
    ]
  }
}

resource deadLettered 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: 'ma-dead-lettered-${namePrefix}'
  location: 'global'
  tags: tags
  properties: {
    description: 'A queue holds dead-lettered messages: read the DeadLetterReason of each and resubmit or discard.'
    severity: 2
    enabled: true
    scopes: [
      serviceBusNamespaceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    actions: [
      {
        actionGroupId: actionGroup.id
      }
    ]
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
    description: 'A supervisor run failed a phase (SupervisorPhaseFailed) or skipped a state document that does not map (UnmappedDocument): expired attempts, compensations or owed notifications may not be handled. Read the phase, orderId and error fields of the events.'
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
          // one alert per event, phase and order: a phase failing every run pages once, a second document pages too
          query: 'AppTraces | where tostring(Properties.event) in ("SupervisorPhaseFailed", "UnmappedDocument") | extend eventName = tostring(Properties.event), phase = coalesce(tostring(Properties.phase), "-"), orderId = coalesce(tostring(Properties.orderId), "-")'
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

resource alertsUndelivered 'Microsoft.Insights/scheduledQueryRules@2022-06-15' = {
  name: 'sqr-alerts-undelivered-${namePrefix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Operator alert or final status given up'
    description: 'An operator alert the alert courier gave up on after about six hours of failed sends, or one the orders trigger could neither send nor hand to the courier (AlertUndelivered: it never reached operator-alerts), or a final status given up whose StatusUndelivered alert could not be sent either (AlertSendFailed with alertKind StatusUndelivered). Read the alertKind, orderId and summary fields of the events.'
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
          query: 'AppTraces | where tostring(Properties.event) == "AlertUndelivered" or (tostring(Properties.event) == "AlertSendFailed" and tostring(Properties.alertKind) == "StatusUndelivered") | extend alertKind = tostring(Properties.alertKind), orderId = coalesce(tostring(Properties.orderId), "-")'
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
