// Service answers the azure-cosmos SDK's own retry policies act on, given by the protocol server itself, so the
// SDK's retries run between the app and the fault as they do on Azure (docs/testing.md, "The SDK's retries").
// The runner's other Cosmos faults are injected above the SDK (localrun/audit.py) and never reach its policies.
//
// Rules are set by whoever started the server (CosmosServer.set_faults, the tests' cosmos_faults fixture) on a
// route no Cosmos DB client calls, POST /_localrun/faults {"rules": [...]}, which replaces the rules and the log;
// GET answers {"rules": what is left of them, "answered": every fault given, in order}. A rule:
//   op            what it matches: read, create, replace, upsert, delete, patch, query, write (the five writes)
//                 or any (every document request)
//   container     optional: only requests to this container (its name)
//   partitionKey  optional: only requests for this partition key value (the header the SDK sends with each)
//   status        the status answered (429, 449, 408, 410, 500, 503, ...), or "drop": the connection is closed with
//                 no answer (the client sees its response lost), or "hang": no answer at all (the client's read
//                 timeout ends it), or "truncate": the request carried out and its own answer cut in the middle
//                 of its body, the connection closed; substatus: its x-ms-substatus
//   retryAfterMs  optional: x-ms-retry-after-ms, as the service sends with a 429
//   times         how many matching requests it answers (default 1), skip: how many it lets through first
//   commit        false (default): the request is refused, nothing stored, as Azure does for 429, 449, 503 and
//                 410; true: the request is carried out first, then the fault is its answer (a 408 or 500, a
//                 dropped connection, after the write landed)
// The first rule that matches a request and has times left answers it. Before the rules, a document request
// carrying the header x-localrun-fault ({"status", "substatus", "retryAfterMs"}: the runner's profile key
// cosmos.service_fault_rate, localrun/service_faults.py, decides which) is answered so, not carried out, not logged.
const crypto = require("crypto");

const ROUTE = "/_localrun/faults";
const WRITES = new Set(["create", "replace", "upsert", "delete", "patch"]);
const NAMES = { 408: "RequestTimeout", 410: "Gone", 429: "TooManyRequests", 449: "RetryWith", 500: "InternalServerError", 503: "ServiceUnavailable" };

const truthy = (value) => String(value || "").toLowerCase() === "true";

// The document operation a request is, or null for anything else (databases, collections, routing).
const operationOf = (req) => {
  const path = req.url.split("?")[0].replace(/\/+$/, "");
  if (!/\/colls\/[^/]+\/docs(\/|$)/.test(path)) return null;
  const one = /\/docs\/[^/]+$/.test(path);
  const h = req.headers;
  if (req.method === "GET") return one ? "read" : "query";
  if (req.method === "PUT") return "replace";
  if (req.method === "DELETE") return "delete";
  if (req.method === "PATCH") return "patch";
  if (req.method === "POST") {
    if (truthy(h["x-ms-documentdb-isquery"]) || String(h["content-type"] || "").startsWith("application/query+json")) return "query";
    return truthy(h["x-ms-documentdb-is-upsert"]) ? "upsert" : "create";
  }
  return null;
};

const partitionKeyOf = (req) => {
  try {
    const value = JSON.parse(req.headers["x-ms-documentdb-partitionkey"] || "null");
    return Array.isArray(value) && value.length === 1 ? value[0] : undefined;
  } catch (err) {
    return undefined;
  }
};

const containerOf = (req) => decodeURIComponent((/\/colls\/([^/]+)\//.exec(req.url) || [])[1] || "");

const matches = (rule, req, op, pk) =>
  (rule.op === "any" || rule.op === op || (rule.op === "write" && WRITES.has(op))) &&
  (rule.container === undefined || rule.container === containerOf(req)) &&
  (rule.partitionKey === undefined || rule.partitionKey === pk);

const answer = (res, rule, op) => {
  if (rule.status === "drop") {
    res.socket.destroy();
    return;
  }
  if (rule.status === "hang") {
    res.socket.setTimeout(0);
    return; // the socket stays open with nothing sent: the client gives up
  }
  res.statusCode = rule.status;
  res.setHeader("content-type", "application/json");
  res.setHeader("connection", "keep-alive");
  res.setHeader("x-ms-activity-id", crypto.randomUUID());
  res.setHeader("x-ms-request-charge", "1");
  if (rule.substatus !== undefined) res.setHeader("x-ms-substatus", String(rule.substatus));
  if (rule.retryAfterMs !== undefined) res.setHeader("x-ms-retry-after-ms", String(rule.retryAfterMs));
  const message = `fault of the local server (localrun/cosmos_faults.cjs): ${rule.status} on ${op}`;
  res.end(JSON.stringify({ code: NAMES[rule.status] || String(rule.status), message }));
};

// The handler's own answer, cut in the middle of its body (content-length says the whole), then the connection closed.
const cutShort = (res) => {
  res.end = (body) => {
    const bytes = Buffer.from(body || "");
    res.setHeader("content-length", String(bytes.length));
    res.write(bytes.subarray(0, Math.floor(bytes.length / 2)), () => res.socket.destroy());
    return res;
  };
};

// Lets the handler carry the request out with everything it writes to ``res`` held back, then ``then()``.
const holdBack = (res, then) => {
  const own = { setHeader: res.setHeader, writeHead: res.writeHead, write: res.write, end: res.end };
  res.setHeader = () => res;
  res.writeHead = () => res;
  res.write = () => true;
  res.end = () => {
    Object.assign(res, own);
    res.statusCode = 200;
    then();
    return res;
  };
};

exports.install = (server) => {
  let rules = [];
  let answered = [];

  const control = (req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      if (req.method === "POST") {
        try {
          const given = JSON.parse(Buffer.concat(chunks).toString("utf8")).rules;
          if (!Array.isArray(given)) throw new Error("rules: a list expected");
          rules = given.map((rule) => ({ times: 1, skip: 0, commit: false, ...rule }));
          answered = [];
        } catch (err) {
          res.statusCode = 400;
          res.end(JSON.stringify({ message: String(err.message) }));
          return;
        }
      }
      res.end(JSON.stringify({ rules, answered }));
    });
  };

  const handlers = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    if (req.url.split("?")[0] === ROUTE) {
      control(req, res);
      return;
    }
    const told = req.headers["x-localrun-fault"];
    if (told !== undefined && operationOf(req) !== null) {
      const rule = JSON.parse(told);
      req.resume();
      req.on("end", () => answer(res, rule, operationOf(req)));
      return;
    }
    const op = rules.length ? operationOf(req) : null;
    const pk = op ? partitionKeyOf(req) : undefined;
    const rule = op ? rules.find((r) => r.times > 0 && matches(r, req, op, pk)) : undefined;
    if (rule === undefined) {
      handlers.forEach((handle) => handle(req, res));
      return;
    }
    if (rule.skip > 0) {
      rule.skip -= 1;
      handlers.forEach((handle) => handle(req, res));
      return;
    }
    rule.times -= 1;
    answered.push({ op, container: containerOf(req), partitionKey: pk === undefined ? null : pk, status: rule.status, commit: rule.commit });
    if (rule.status === "truncate") {
      cutShort(res);
      handlers.forEach((handle) => handle(req, res));
      return;
    }
    if (!rule.commit) {
      req.resume(); // not read: drained, so the connection serves the next request
      req.on("end", () => answer(res, rule, op));
      return;
    }
    holdBack(res, () => answer(res, rule, op));
    handlers.forEach((handle) => handle(req, res));
  });
};
