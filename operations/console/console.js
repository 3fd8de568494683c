// The operator console: plain JavaScript, no framework, nothing loaded from elsewhere.
// It reads /api/ops/* (Orders.Read) and posts actions as same-origin JSON (Orders.Operate).
"use strict";

const API = location.pathname.replace(/\/console(\/.*)?$/i, ""); // the route matches any case, so does this
const STATES = ["Pending", "Processing", "Processed", "Error", "Compensating", "Compensated", "CompensationFailed"];
const REFRESH_MS = 3000;
let listContinuation = null;
let listState = ""; // the state of the list shown: its continuation resumes that list only
let listRequest = 0; // the newest list request: an answer to an older one is dropped
let listPage = 0; // the page of the list shown: the first one is refreshed with the overview, a later one is kept
let current = null; // the order shown, with its detail
// The action on screen for confirmation, as confirmed: { action, orderId, reason, decision, reviewId, undoneByHand,
// sequenceNumber } (sequenceNumber: the deferred payment notification a discard names).
// What is posted is this, never the page as it is when Confirm is clicked.
let pendingAction = null;
// The compensation log entries of a CompensationFailed order the operator ticked as undone by hand (their seq),
// kept across the page's refreshes (which redraw the log) for the order they were ticked on.
let byHand = { orderId: null, seqs: new Set() };

function $(id) { return document.getElementById(id); }

// 2026-01-01T08:31:00.780221+00:00 -> 2026-01-01 08:31:00 UTC (the API's times are all UTC)
function when(t) {
  return t ? String(t).replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, " UTC") : "";
}

function say(text, isError) {
  const box = $("status");
  box.textContent = text;
  box.className = "status" + (isError ? " error" : text ? " ok" : "");
}

async function api(path, options) {
  const response = await fetch(API + path, Object.assign({ credentials: "same-origin", headers: { "Accept": "application/json" } }, options || {}));
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (response.status === 401) {
    const back = encodeURIComponent(location.pathname + location.hash);
    say("Sign in first: /.auth/login/aad?post_login_redirect_uri=" + back, true);
  }
  return { status: response.status, body: body };
}

function cell(row, text, header) {
  const el = document.createElement(header ? "th" : "td");
  if (header) el.scope = header === true ? "col" : header;
  el.textContent = text === null || text === undefined ? "" : String(text);
  row.appendChild(el);
  return el;
}

function orderLink(orderId) {
  const a = document.createElement("a");
  a.href = "#/order/" + encodeURIComponent(orderId);
  a.textContent = orderId;
  return a;
}

function fillTable(table, columns, rows, empty) {
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  columns.forEach(c => cell(head, c.title, true));
  const body = table.createTBody();
  if (!rows.length) {
    const r = body.insertRow();
    const td = cell(r, empty || "none");
    td.colSpan = columns.length;
    td.className = "empty";
    return;
  }
  rows.forEach(item => {
    const r = body.insertRow();
    columns.forEach(c => {
      const value = c.value(item);
      const td = document.createElement("td");
      if (value instanceof Node) td.appendChild(value); else td.textContent = value === null || value === undefined ? "" : String(value);
      r.appendChild(td);
    });
  });
}

const ORDER_COLUMNS = [
  { title: "Order", value: o => orderLink(o.orderId) },
  { title: "State", value: o => o.processState + (o.waitingForReview ? " (review)" : "") },
  { title: "Attempt", value: o => o.attempt },
  { title: "Failures", value: o => o.failureCount },
  { title: "Step", value: o => o.currentStep || "" },
  { title: "completeBy", value: o => when(o.completeBy) },
  { title: "Last error", value: o => timesIn(o.lastError) },
];
// A compensation round stuck past its deadline (the supervisor backs it off, or fails the compensation at maxRounds).
const STUCK_COLUMNS = [
  { title: "Order", value: o => orderLink(o.orderId) },
  { title: "Round", value: o => o.round },
  { title: "Failed rounds", value: o => o.failureCount + " of " + o.maxRounds },
  { title: "Undoing", value: o => o.undoService || "" },
  { title: "completeBy", value: o => when(o.completeBy) },
  { title: "Last error", value: o => timesIn(o.lastError) },
];
// A compensation released to wait its undo's service's outage out: its next round not before completeBy.
const OUTAGE_WAIT_COLUMNS = [
  { title: "Order", value: o => orderLink(o.orderId) },
  { title: "Waiting for", value: o => timesIn(o.lastError) },
  { title: "Since", value: o => when(o.waitingSince) },
  { title: "Next round not before", value: o => when(o.completeBy) },
  { title: "Failed rounds", value: o => o.failureCount },
];
// A state document that does not map to a record: the API leaves it out of the lists and names it.
const UNREADABLE_COLUMNS = [
  { title: "Order", value: u => orderLink(u.orderId) },
  { title: "What is wrong", value: u => u.error },
];
// The reviews waiting, their deadlines read against the app's clock (``now``): "(passed)" once it reached them.
function reviewColumns(now) {
  return [
    { title: "Order", value: o => orderLink(o.orderId) },
    { title: "Decide by", value: o => deadline(o.decideBy, now) },
    { title: "Without an answer", value: o => o.defaultAction || "" }, // empty: a record that did not keep it
    { title: "Step", value: o => o.currentStep || "" }, // the step paused; lastError is empty while it waits
  ];
}

async function refreshOverview() {
  const summary = await api("/summary");
  if (summary.status !== 200) {
    if (summary.status !== 401) say((summary.body && summary.body.error) || "summary: HTTP " + summary.status, true);
    return;
  }
  const s = summary.body;
  $("now").textContent = when(s.now);
  const tiles = $("tiles");
  tiles.replaceChildren();
  STATES.forEach(state => {
    const li = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "tile tile-" + state;
    button.setAttribute("aria-label", state + ": " + (s.counts[state] || 0) + " orders, show them");
    const n = document.createElement("span"); n.className = "n"; n.textContent = s.counts[state] || 0;
    const label = document.createElement("span"); label.className = "label"; label.textContent = state;
    button.append(n, label);
    button.addEventListener("click", () => { $("list-state").value = state; loadList(true); });
    li.appendChild(button);
    tiles.appendChild(li);
  });
  const more = s.processingCapped ? "+" : "";  // the summary read only the oldest Processing records
  $("reviews-count").textContent = "(" + s.waitingForReviewCount + more + ")";
  $("expired-count").textContent = "(" + s.expiredCount + more + ")";
  fillTable($("reviews"), reviewColumns(s.now), s.waitingForReview, "no order waits for review");
  fillTable($("expired"), ORDER_COLUMNS, s.expired, "no expired order");
  // the summary read only the oldest Compensating records
  $("stuck-count").textContent = "(" + s.stuckCompensationsCount + (s.compensatingCapped ? "+" : "") + ")";
  fillTable($("stuck"), STUCK_COLUMNS, s.stuckCompensations, "no stuck compensation");
  $("outage-waits-count").textContent = "(" + s.compensationsWaitingOutageCount + (s.compensatingCapped ? "+" : "") + ")";
  fillTable($("outage-waits"), OUTAGE_WAIT_COLUMNS, s.compensationsWaitingOutage, "none");
  fillTable($("errors"), ORDER_COLUMNS, s.needOperator.Error, "none");
  fillTable($("compfailed"), ORDER_COLUMNS, s.needOperator.CompensationFailed, "none");
  $("unreadable-section").hidden = !s.unreadableCount;
  $("unreadable-count").textContent = "(" + s.unreadableCount + ")";
  fillTable($("unreadable"), UNREADABLE_COLUMNS, s.unreadable, "none");
  const alerts = $("alerts");
  alerts.replaceChildren();
  const none = s.recentAlertsError ? "alerts not shown: " + s.recentAlertsError : "no alert";
  (s.recentAlerts.length ? s.recentAlerts : [{ summary: none }]).forEach(a => {
    const li = document.createElement("li");
    li.textContent = [when(a.at), a.severity, a.kind].filter(Boolean).join(" · ");
    if (a.orderId) li.append(li.textContent ? " · " : "", orderLink(a.orderId)); // the page to act on
    if (a.summary) li.append(li.textContent ? " · " : "", a.summary);
    alerts.appendChild(li);
  });
}

// fresh: the first page of the state selected; again: the first page of the list shown, read anew (its
// "Next page" keeps working meanwhile); neither: the list's next page.
async function loadList(fresh, again) {
  if (fresh) { listContinuation = null; listState = $("list-state").value; }
  listPage = fresh || again ? 1 : listPage + 1;
  const state = listState;
  const from = again ? null : listContinuation;
  let path = "/orders?pageSize=25" + (state ? "&state=" + encodeURIComponent(state) : "");
  if (from) path += "&continuation=" + encodeURIComponent(from);
  const mine = ++listRequest;
  const page = await api(path);
  if (mine !== listRequest) return; // another list was asked for since
  if (page.status !== 200) { say((page.body && page.body.error) || "orders: HTTP " + page.status, true); return; }
  fillTable($("list"), ORDER_COLUMNS, page.body.orders, "no order");
  const skipped = page.body.unreadable || [];
  if (skipped.length) say(skipped.length + " state document(s) on this page do not map to a record and are not listed: " + skipped.map(u => u.orderId).join(", "), true);
  listContinuation = page.body.continuation;
  $("list-more").hidden = !listContinuation;
}

function fact(dl, term, value) {
  const dt = document.createElement("dt"); dt.textContent = term;
  const dd = document.createElement("dd"); dd.textContent = value === null || value === undefined ? "—" : String(value);
  dl.append(dt, dd);
}

// A text's times (a history entry's detail, a lastError: written Z, or +00:00 by a release before session 63)
// as when() writes them.
function timesIn(text) {
  return text ? String(text).replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)/g, when) : "";
}

// A history entry's detail as the rest of the page reads: its times as when() writes them, an instance
// id alone (a claim's) as instanceLabel() names it.
function detailText(detail, orderId) {
  if (!detail) return "";
  const named = instanceLabel(detail, orderId);
  if (named !== detail) return named;
  return timesIn(detail);
}

function timelineItems(d) {
  const items = [];
  (d.transitions || []).forEach(t => items.push({ at: t.at, kind: "transition", text: t.event + " by " + instanceLabel(t.by, d.orderId) + (t.detail ? ": " + detailText(t.detail, d.orderId) : "") }));
  Object.entries(d.steps || {}).forEach(([name, s]) => {
    items.push({ at: s.startedAt, kind: "step", text: "step " + name + " started via " + s.agent + " (attempt " + s.attempt + ")" });
    if (s.finishedAt) items.push({ at: s.finishedAt, kind: "step", text: "step " + name + " " + s.status + (s.error ? ": " + s.error : "") });
  });
  (d.compensation || []).forEach(c => {
    items.push({ at: c.at, kind: "compensation", text: "log entry " + c.seq + ": " + c.undoAction + " of " + c.step + " via " + c.agent });
    if (c.outcomeAt) items.push({ at: c.outcomeAt, kind: "compensation", text: "undo " + c.seq + " " + c.outcome + (c.error ? ": " + c.error : "") });
  });
  return items.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
}

// Admission control's refusal of the order (MAX_PENDING), from its deferral document.
function refusalText(r) {
  const when_ = r.rejectedAt ? "refused by admission control at " + when(r.rejectedAt) : "refused by admission control before, accepted since";
  const dead = (r.refusedNotifications || []).map(n => n.sequenceNumber);
  const count = dead.length + (r.refusedNotificationsUnlisted || 0);
  return when_ + (count ? "; " + count + " payment notification(s) dead-lettered OrderRejected" + (dead.length ? " (sequence numbers " + dead.join(", ") + ")" : "") : "");
}

// What the operator can do with the order in this state, and what happens without them.
function actHint(state, d, passed) {
  if (d.review) {
    const itsDefault = "its default" + (d.review.defaultAction ? " (" + d.review.defaultAction + ")" : "");
    if (d.review.noted) return "The answer is noted: if its delivery failed, answer the same again (only that answer is taken).";
    return reviewClosed(d)
      ? "The review's deadline (" + when(d.review.decideBy) + ") has passed: the attempt takes " + itsDefault + " and an answer is refused now." + (d.pastPivot ? "" : " You can still cancel the order.")
      : "The attempt is paused at " + d.review.step + " and waits for your decision until " + when(d.review.decideBy) +
        "; without one it takes " + itsDefault + ". Answer the review" + (d.pastPivot ? "." : ", or cancel the order.");
  }
  if (d.pastPivot && ["Error", "Pending", "Processing"].includes(state)) {
    return "The shipment is under way or done (past the pivot): nothing can be undone, so cancel and compensate are refused. " +
      (state === "Error" ? "Resubmit runs it again (Error → Pending)." : "It runs on to the end.");
  }
  switch (state) {
    case "Error": return "The order failed. Resubmit runs it again (Error → Pending); Compensate undoes its completed steps; Cancel order undoes them as a cancellation.";
    case "CompensationFailed": return "An undo failed. Compensate starts a new compensation round for the entries not undone. " +
      "If you undid an entry yourself (e.g. refunded at the provider), tick it in the compensation log below first: the round then skips it.";
    case "Pending":
    case "Processing":
      return (passed ? "Its completeBy has passed: the supervisor recovers an expired attempt on its own. " : "In progress: nothing to do. ") +
        "Cancel order stops it and undoes its completed steps (not past the pivot).";
    case "Compensating":
      if (!passed) {
        return ((d.state || {}).lockedBy ? "Its compensation round is under way" : "Its next compensation round waits (a backoff, or an outage waited out) until completeBy") +
          ": no action applies; it ends Compensated or CompensationFailed.";
      }
      return ((d.state || {}).lockedBy
        ? "Its compensation round is past its deadline (stuck): the supervisor counts it as a failed round and starts the next one after a backoff (CompensationFailed after MAX_FAILURES); "
        : "Its next compensation round is due: the supervisor starts it on its next run; ") + "no action applies.";
    case "Processed":
    case "Compensated": return "Settled: no action applies.";
    default:
      return discardable(d).length
        ? "A payment came for this order and nobody submitted the order. Find the order and resubmit it, or refund the payment; " +
          "once refunded, give a reason and discard the notification below (Deferred payment notifications): it is dead-lettered " +
          "DiscardedByOperator, and an order submitted under this id later does not take it."
        : "No action applies: the order has no readable state record.";
  }
}

// The deferred payment notifications an operator may discard: waiting for an order that has not come (no order, no
// state record). Any other entry is decided by the app (the API refuses a discard of it, 409).
function discardable(d) {
  if (d.order || d.state || d.stateError) return [];
  return (d.deferredNotifications || []).filter(e =>
    e.status === "Deferred" && e.reason === "OrderNotSubmitted" && e.messageType === "PaymentNotification");
}

// The "Discard" button of a deferred payment notification waiting for an order that never came.
function discardButton(entry, open) {
  if (!open.has(entry.sequenceNumber)) return "";
  const button = document.createElement("button");
  button.type = "button";
  button.className = "discard";
  button.textContent = "Discard";
  button.setAttribute("aria-label", "Discard payment notification " + entry.sequenceNumber + " (" + (entry.notificationId || entry.messageId) + ")");
  button.addEventListener("click", () => askConfirm("discard", entry.sequenceNumber));
  return button;
}

// A review nobody answered whose deadline the app's clock has reached: the API refuses any answer (409)
function reviewClosed(d) {
  return !d.review.noted && Boolean(d.now) && Date.parse(d.review.decideBy) <= Date.parse(d.now);
}

// What the paused attempt does if nobody answers its review in time (review.defaultAction: absent from a
// record written before it was kept, then nothing is said). A default that runs the step again (retry,
// alternative) may come back to a second review: left unanswered too, that one compensates.
function unansweredText(review) {
  const action = review.defaultAction;
  const again = action === "retry" || action === "alternative"
    ? " (if the step fails again, a second review left unanswered compensates)" : "";
  return "if nobody answers by " + when(review.decideBy) + ": " + action + again;
}

// "2026-01-01 08:03:00 UTC", and "(passed)" when the app's clock is past it
function deadline(t, now) {
  if (!t) return null;
  return when(t) + (now && Date.parse(t) <= Date.parse(now) ? " (passed)" : "");
}

// An orchestration instance of the order, as an operator reads it: "attempt 3 (o-1:3)", "compensation
// round 4 (o-1:compensate:4)" (domain/ids.py builds both); any other id as it is.
function instanceLabel(id, orderId) {
  if (!id || !id.startsWith(orderId + ":")) return id;
  const rest = id.slice(orderId.length + 1);
  if (/^[1-9][0-9]*$/.test(rest)) return "attempt " + rest + " (" + id + ")";
  const round = /^compensate:([1-9][0-9]*)$/.exec(rest);
  return round ? "compensation round " + round[1] + " (" + id + ")" : id;
}

// How often, and how long apart, the page reads an order again after an action whose write it does not show yet.
const BEHIND_TRIES = 4;
const BEHIND_WAIT_MS = 1000;

// Whether the order page's state record is older than the version an action's 200 answered with (``updatedAt``).
// The GET may be served by another instance, whose Cosmos DB client has no session token for the action's write:
// its replica may be a write behind (Session consistency) for a moment.
function behind(found, updatedAt) {
  const st = found.status === 200 && found.body.state;
  return Boolean(updatedAt && st && st.updatedAt && Date.parse(st.updatedAt) < Date.parse(updatedAt));
}

// The newest version of the order the page knows: the one it shows, or ``updatedAt`` (an action's 200) if newer.
function newest(orderId, updatedAt) {
  const shown = current && current.orderId === orderId && current.state ? current.state.updatedAt : null;
  if (!shown || !updatedAt) return shown || updatedAt || null;
  return Date.parse(updatedAt) > Date.parse(shown) ? updatedAt : shown;
}

// The order as it is now, never older than what the page knows of it. After an action (``updatedAt``: the version
// its 200 answered with) it is read again, a second apart, while the read is older than that version, and said so
// if it stays older; a refresh that reads a version older than the one shown leaves the page as it is.
async function showOrder(orderId, quiet, updatedAt) {
  const floor = newest(orderId, updatedAt);
  let found = await api("/orders/" + encodeURIComponent(orderId));
  for (let tries = 1; updatedAt && tries < BEHIND_TRIES && behind(found, floor); tries++) {
    await new Promise(resolve => setTimeout(resolve, BEHIND_WAIT_MS));
    found = await api("/orders/" + encodeURIComponent(orderId));
  }
  if (behind(found, floor)) {
    if (!updatedAt) return; // a refresh read from a replica behind the page: what the page shows is newer
    const box = $("status");
    say(box.textContent + " The page below was read from a copy of the store that does not have that yet: it shows the order as it was before; reload it in a few seconds.", box.classList.contains("error"));
  }
  if (found.status !== 200) {
    say((found.body && found.body.error) || "order " + orderId + ": HTTP " + found.status, true);
    return;
  }
  const d = found.body;
  current = d;
  if (byHand.orderId !== d.orderId) byHand = { orderId: d.orderId, seqs: new Set() };
  // a tick stands only for an entry still not undone of an order still CompensationFailed (another operator, or
  // a round, may have settled it since): the page never posts one the API would refuse
  const open = (d.state || {}).processState === "CompensationFailed"
    ? new Set((d.compensation || []).filter(c => c.outcome !== "Undone").map(c => c.seq)) : new Set();
  [...byHand.seqs].forEach(seq => { if (!open.has(seq)) byHand.seqs.delete(seq); });
  if (d.now) $("now").textContent = when(d.now);
  $("overview").hidden = true;
  $("order").hidden = false;
  $("order-title").textContent = "Order " + d.orderId;
  const st = d.state || {};
  const facts = $("order-facts");
  facts.replaceChildren();
  const noted = d.review && d.review.noted;
  fact(facts, "State", (st.processState || (d.stateError ? "unreadable state document" : "no state record")) + (d.review ? (noted ? " — review answered, delivery uncertain" : " — waiting for review") : ""));
  if (d.stateError) fact(facts, "State document", "does not map to a record: " + d.stateError + " (repair it in the state container)");
  fact(facts, "Attempt", st.attempt);
  fact(facts, "Failures", st.failureCount);
  fact(facts, "Current step", st.currentStep);
  fact(facts, "completeBy", deadline(st.completeBy, d.now));
  fact(facts, "Locked by", instanceLabel(st.lockedBy, d.orderId));
  fact(facts, "Last error", st.lastError ? timesIn(st.lastError) : st.lastError);
  if (d.order) fact(facts, "Total", (d.order.totalCents / 100).toFixed(2) + " " + d.order.currency);
  if (d.review) fact(facts, "Review", d.review.reviewId + " at " + d.review.step + ", decide by " + deadline(d.review.decideBy, d.now));
  if (d.review && !noted && d.review.defaultAction) fact(facts, "Without an answer", unansweredText(d.review));
  if (noted) fact(facts, "Answer noted", noted.action + " by " + noted.operator + ": if its delivery failed, answer the same again to deliver it");
  if (d.deferralError) fact(facts, "Deferred notifications", "their document does not map: " + d.deferralError);
  if (d.refusal) fact(facts, "Refused", refusalText(d.refusal));
  const state = st.processState;
  const answerable = Boolean(d.review) && !reviewClosed(d);
  $("btn-review").hidden = !answerable;
  $("review-choice").hidden = !answerable;
  // a noted answer can only be posted again as it is: another one is 409
  if (answerable) offerChoices(noted ? [noted.action] : d.review.choices);
  $("btn-resubmit").hidden = state !== "Error";
  // past the pivot nothing may be undone: the API refuses both (409)
  $("btn-compensate").hidden = !(state === "CompensationFailed" || (state === "Error" && !d.pastPivot));
  $("btn-cancel").hidden = d.pastPivot || !(state === "Pending" || state === "Processing" || state === "Error");
  const anyAction = [...document.querySelectorAll("#action-form [data-action]")].some(b => !b.hidden);
  const discards = new Set(discardable(d).map(e => e.sequenceNumber));
  $("action-form").hidden = !anyAction && !discards.size; // no reason box where no action applies
  const passed = st.completeBy && d.now && Date.parse(st.completeBy) <= Date.parse(d.now);
  $("act-hint").textContent = actHint(state, d, passed);
  const timeline = $("timeline");
  timeline.replaceChildren();
  timelineItems(d).forEach(item => {
    const li = document.createElement("li");
    li.className = "tl-" + item.kind;
    const time = document.createElement("time"); time.dateTime = item.at; time.textContent = when(item.at);
    li.append(time, document.createTextNode(" " + item.text));
    timeline.appendChild(li);
  });
  fillTable($("attempts"), [
    { title: "Kind", value: a => a.kind },
    { title: "Instance", value: a => instanceLabel(a.instanceId, d.orderId) },
    { title: "Runtime status", value: a => a.runtimeStatus || (a.historyPurged ? "finished, history purged (DURABLE_HISTORY_RETENTION_DAYS)" : "unknown to Durable") },
    { title: "Last event", value: a => a.lastEvent ? a.lastEvent.type + (a.lastEvent.name ? " " + a.lastEvent.name : "") + " at " + when(a.lastEvent.at) : "" },
  ], d.attempts || [], d.attemptsError ? "not shown: " + d.attemptsError : "no attempt yet");
  fillTable($("complog"), [
    { title: "#", value: c => c.seq },
    { title: "Step", value: c => c.step },
    { title: "Undo", value: c => c.undoAction + " via " + c.agent },
    { title: "Outcome", value: c => c.outcome ? c.outcome + (c.undoneBy ? " by hand (" + c.undoneBy + ")" : "") : "not undone" },
    { title: "Error", value: c => c.error || "" },
  ].concat(state === "CompensationFailed" ? [{ title: "Undone by hand", value: c => byHandBox(c) }] : []), d.compensation || [], "empty");
  fillTable($("statuses"), [
    { title: "Status", value: s => s.status },
    { title: "Attempt", value: s => s.attempt },
    { title: "At", value: s => when(s.at) },
    { title: "Reason", value: s => s.reason || "" },
  ], d.statusesSent || [], d.attemptsError ? "not shown: " + d.attemptsError
    : d.historiesPurged ? "none in the histories kept: " + d.historiesPurged + " purged (DURABLE_HISTORY_RETENTION_DAYS)"
    : "none recorded in the attempts' histories");
  fillTable($("deferred"), [
    { title: "Sequence", value: e => e.sequenceNumber },
    { title: "Type", value: e => e.messageType },
    { title: "Status", value: e => e.status },
    { title: "Reason", value: e => e.reason },
    { title: "Detail", value: e => e.detail || "" },
  ].concat(discards.size ? [{ title: "Action", value: e => discardButton(e, discards) }] : []), d.deferredNotifications || [], "none");
  $("raw").textContent = JSON.stringify({ order: d.order, state: d.state }, null, 2);
  if (!quiet) { $("order-title").tabIndex = -1; $("order-title").focus(); }
}

// The "undone by hand" tick of a log entry not undone (a compensate names the ticked ones, "undoneByHand");
// an entry undone already has none (the API refuses it, 409).
function byHandBox(entry) {
  if (entry.outcome === "Undone") return "";
  const box = document.createElement("input");
  box.type = "checkbox";
  box.className = "by-hand";
  box.value = String(entry.seq);
  box.checked = byHand.seqs.has(entry.seq);
  box.setAttribute("aria-label", "Entry " + entry.seq + " (" + entry.undoAction + " of " + entry.step + ") undone by hand");
  box.addEventListener("change", () => { if (box.checked) byHand.seqs.add(entry.seq); else byHand.seqs.delete(entry.seq); });
  return box;
}

function byHandNamed(seqs) {
  return seqs.length ? ", entr" + (seqs.length > 1 ? "ies " : "y ") + seqs.join(", ") + " undone by hand" : "";
}

// Only the answers the review takes (its "choices": no "alternative" where no fallback can take the step
// over, e.g. a prepaid order's payment); without the list (an older API), every answer.
function offerChoices(choices) {
  const radios = [...document.querySelectorAll("input[name=decision]")];
  for (const radio of radios) {
    const offered = !choices || choices.includes(radio.value);
    radio.closest("label").hidden = !offered;
    radio.disabled = !offered;
    if (!offered) radio.checked = false;
  }
  if (!radios.some(r => r.checked)) {
    const first = radios.find(r => !r.disabled);
    if (first) first.checked = true;
  }
}

function askConfirm(action, sequenceNumber) {
  const reason = $("reason").value.trim();
  if (!reason) { say("Give a reason first.", true); $("reason").focus(); return; }
  const decision = action === "review" ? document.querySelector("input[name=decision]:checked").value : null;
  // the review the operator saw when they chose their answer
  const reviewId = action === "review" && current.review ? current.review.reviewId : null;
  // the entries ticked as undone by hand, of the order the operator sees: only a compensate of a CompensationFailed order names them
  const undoneByHand = action === "compensate" && (current.state || {}).processState === "CompensationFailed" && byHand.orderId === current.orderId
    ? [...byHand.seqs].sort((a, b) => a - b) : [];
  const seq = action === "discard" ? sequenceNumber : null;
  pendingAction = { action: action, orderId: current.orderId, reason: reason, decision: decision, reviewId: reviewId, undoneByHand: undoneByHand, sequenceNumber: seq };
  const what = decision ? "answer review " + reviewId + " with “" + decision + "”"
    : seq !== null ? "discard payment notification " + seq + " (dead-lettered, never applied)" : action;
  $("confirm-text").textContent = "Confirm: " + what + " for order " + current.orderId + byHandNamed(undoneByHand) + "?";
  $("confirm").hidden = false;
  $("confirm-yes").focus();
}

function closeConfirm() {
  $("confirm").hidden = true;
  pendingAction = null;
}

// What a 200 says beyond "taken": who carries a review answer out, or that it was taken already.
function doneHow(b) {
  if (b.carriedOutBy === "supervisor") {
    return " Its attempt is gone: the supervisor carries the answer out when it recovers the order" +
      (b.notBefore ? " (not before " + when(b.notBefore) + ")" : "") + "; there is nothing more to post.";
  }
  if (b.takenAtDeadline) return " The attempt took this answer when it closed the review at its deadline.";
  return b.repeated ? " It had been taken already: nothing new was written." : "";
}

async function act() {
  const confirmed = pendingAction;
  closeConfirm();
  if (!confirmed) return;
  const action = confirmed.action;
  const orderId = confirmed.orderId;
  const body = { reason: confirmed.reason };
  if (action === "review") {
    body.action = confirmed.decision;
    body.reviewId = confirmed.reviewId; // an answer names its review: never taken as the answer to a later one
  }
  if (confirmed.undoneByHand.length) body.undoneByHand = confirmed.undoneByHand;
  const target = action === "discard" ? "/deferred/" + encodeURIComponent(confirmed.sequenceNumber) + "/discard" : "/" + action;
  const answer = await api("/orders/" + encodeURIComponent(orderId) + target, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Accept": "application/json" },
    body: JSON.stringify(body),
  });
  if (answer.status === 200 && action === "discard") {
    say(discardedText(orderId, confirmed.sequenceNumber, answer.body), false);
    $("reason").value = "";
  } else if (answer.status === 200) {
    // the state the answer carries is the one the action left; the page below reloads the order as it is now
    say("Done: " + action + " of " + orderId + " recorded while the order was " + answer.body.order.processState +
      "; below, the order as it is now." + doneHow(answer.body), false);
    $("reason").value = "";
    if (byHand.orderId === orderId) byHand.seqs.clear();
  } else {
    const why = (answer.body && answer.body.error) || "HTTP " + answer.status;
    // 503: the action may or may not be taken; the same one posted again is safe (the reason is kept for it)
    say(answer.status === 503
      ? "Not known whether " + action + " of " + orderId + " was taken: " + why + ". Confirm the same action again (the reason is kept)."
      : "Not done: " + action + " of " + orderId + " was refused: " + why + ". Below, the order as it is now.", true);
  }
  const taken = answer.status === 200 && answer.body && answer.body.order ? answer.body.order.updatedAt : null;
  if (current && current.orderId === orderId) await showOrder(orderId, true, taken);
  $("status").focus(); // the confirmation that had focus is gone: the answer takes it, and is scrolled to
}

// What a discard's 200 says: dead-lettered now, or left to the peek sweep (written, not fetched here), and why.
function discardedText(orderId, seq, b) {
  const how = b.deadLettered ? "dead-lettered DiscardedByOperator now" : "recorded; the peek sweep dead-letters it as recorded";
  return "Done: discard of payment notification " + seq + " of " + orderId + ": " + how + "." +
    (b.note ? " " + b.note + "." : "") + (b.repeated ? " It had been taken already: nothing new was written." : "");
}

function route() {
  const match = location.hash.match(/^#\/order\/(.+)$/);
  closeConfirm(); // a confirmation is for the order it names: leaving that order's page drops it
  say("");
  if (match) {
    let orderId = null;
    try { orderId = decodeURIComponent(match[1]); } catch (e) { orderId = null; } // escapes that do not decode
    if (orderId !== null) { showOrder(orderId); return; }
    say("Not an order link: " + location.hash, true);
  }
  current = null;
  $("order").hidden = true;
  $("overview").hidden = false;
  refreshOverview();
  loadList(true);
}

document.addEventListener("DOMContentLoaded", () => {
  const select = $("list-state");
  STATES.forEach(s => { const o = document.createElement("option"); o.value = s; o.textContent = s; select.appendChild(o); });
  $("search").addEventListener("submit", e => { e.preventDefault(); location.hash = "#/order/" + encodeURIComponent($("search-id").value.trim()); });
  $("list-filter").addEventListener("submit", e => { e.preventDefault(); loadList(true); });
  select.addEventListener("change", () => loadList(true)); // "Next page" never pages another state's list
  $("list-more").addEventListener("click", () => loadList(false));
  document.querySelectorAll("#action-form [data-action]").forEach(b => b.addEventListener("click", () => askConfirm(b.dataset.action)));
  $("confirm-yes").addEventListener("click", act);
  $("confirm-no").addEventListener("click", closeConfirm);
  window.addEventListener("hashchange", route);
  route();
  setInterval(() => {
    if (pendingAction) return;
    if (current) { showOrder(current.orderId, true); return; }
    refreshOverview();
    if (listPage === 1) loadList(false, true); // the list beside the counts stays as current as they are
  }, REFRESH_MS);
});
