// The operators' workbook (Azure Monitor): built only on the structured events the app logs
// (observability/events.py: each a log record whose extra fields become custom dimensions, in the
// workspace's AppTraces table as Properties). tests/infra/test_operations_infra.py checks that every
// Properties field and event name these queries use is one the app emits;
// tests/observability/test_alert_rules_page_each_order.py runs the rows the panels count on the app's records.

param location string
param tags object
param logAnalyticsWorkspaceId string

// A StateTransition whose fromState is its toState (a step's progress, a side note such as NotificationsDelivered)
// is a write, not a move into the state: the two panels below count moves only.
var ordersByState = '''
AppTraces
| where tostring(Properties.event) == "StateTransition" and tostring(Properties.fromState) != tostring(Properties.toState)
| summarize transitions = count() by toState = tostring(Properties.toState), bin(TimeGenerated, 15m)
| render timechart
'''

var recoveries = '''
AppTraces
| where tostring(Properties.event) in ("SupervisorRecovered", "SupervisorEscalated", "SupervisorCompensating", "OperatorResubmitted")
| summarize count() by event = tostring(Properties.event), bin(TimeGenerated, 15m)
| render columnchart
'''

var compensations = '''
AppTraces
| where tostring(Properties.event) == "StateTransition" and tostring(Properties.fromState) != tostring(Properties.toState)
| where tostring(Properties.toState) in ("Compensated", "CompensationFailed") or tostring(Properties.transition) == "CompensationRequested"
| summarize count() by outcome = iff(tostring(Properties.transition) == "CompensationRequested", "Requested", tostring(Properties.toState)), bin(TimeGenerated, 1h)
| render columnchart
'''

var alerts = '''
AppTraces
| where tostring(Properties.event) in ("OperatorAlert", "AlertSendFailed", "AlertUndelivered")
| summarize alerts = count() by kind = tostring(Properties.alertKind), event = tostring(Properties.event), bin(TimeGenerated, 1h)
| render columnchart
'''

var operatorActions = '''
AppTraces
| where tostring(Properties.event) in ("OperatorResubmitted", "OperatorCompensated", "OperatorCancelled", "OperatorReviewed")
| project TimeGenerated, event = tostring(Properties.event), orderId = tostring(Properties.orderId), operator = tostring(Properties.operator), reason = tostring(Properties.reason)
| order by TimeGenerated desc
| take 100
'''

var panels = [
  {
    type: 1
    name: 'intro'
    content: {
      json: '## Orders: Scheduler Agent Supervisor\nFrom the app\'s structured events (docs/observability.md). Act on an order in the ops console: /api/ops/console.'
    }
  }
  {
    type: 3
    name: 'panel-0'
    content: {
      version: 'KqlItem/1.0'
      query: ordersByState
      size: 0
      title: 'Orders by state over time (transitions into each state)'
      timeContext: {
        durationMs: 86400000
      }
      queryType: 0
      resourceType: 'microsoft.operationalinsights/workspaces'
      visualization: 'timechart'
    }
  }
  {
    type: 3
    name: 'panel-1'
    content: {
      version: 'KqlItem/1.0'
      query: recoveries
      size: 0
      title: 'Recoveries and escalations'
      timeContext: {
        durationMs: 86400000
      }
      queryType: 0
      resourceType: 'microsoft.operationalinsights/workspaces'
      visualization: 'barchart'
    }
  }
  {
    type: 3
    name: 'panel-2'
    content: {
      version: 'KqlItem/1.0'
      query: compensations
      size: 0
      title: 'Compensations and their outcomes'
      timeContext: {
        durationMs: 86400000
      }
      queryType: 0
      resourceType: 'microsoft.operationalinsights/workspaces'
      visualization: 'barchart'
    }
  }
  {
    type: 3
    name: 'panel-3'
    content: {
      version: 'KqlItem/1.0'
      query: alerts
      size: 0
      title: 'Operator alerts'
      timeContext: {
        durationMs: 86400000
      }
      queryType: 0
      resourceType: 'microsoft.operationalinsights/workspaces'
      visualization: 'barchart'
    }
  }
  {
    type: 3
    name: 'panel-4'
    content: {
      version: 'KqlItem/1.0'
      query: operatorActions
      size: 0
      title: 'Operator actions (who, why)'
      timeContext: {
        durationMs: 86400000
      }
      queryType: 0
      resourceType: 'microsoft.operationalinsights/workspaces'
      visualization: 'table'
    }
  }
]

var content = {
  version: 'Notebook/1.0'
  items: panels
  fallbackResourceIds: [
    logAnalyticsWorkspaceId
  ]
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(resourceGroup().id, 'orders-operations-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: 'Orders: operations'
    category: 'workbook'
    sourceId: logAnalyticsWorkspaceId
    serializedData: string(content)
  }
}

output id string = workbook.id
