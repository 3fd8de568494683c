// Starts @vercel/cosmosdb-server through its API with HTTP keep-alive on (its CLI answers every
// request with "Connection: close", so each call would pay a new TLS handshake), on loopback only.
// Usage: node cosmos_server.cjs <node_modules dir> <port> [ranges]; port 0: a free port the system picks at
// listen time. Prints "listening <port>" once it listens. Exits when its stdin ends: the process that
// started it holds the other end, so the server never outlives it, even when that process is killed.
// ranges (default 1): the physical partition key ranges every container is split into (cosmos_ranges.cjs).
//
// It refuses what Azure refuses and the protocol server would take: a cross-partition query (the
// enablecrosspartition header, no partition key or key range) with ORDER BY, DISTINCT, GROUP BY or an
// aggregate, resumed with a continuation token, is answered 400. The azure-cosmos SDK does not support it
// (its README, "Limitations": "Continuation token support for aggregate cross-partition queries like
// sorting, counting, and distinct"; only streamable queries, SELECT * FROM c WHERE ..., take one): on
// Azure the gateway asks for a query plan and the SDK's aggregator cannot resume from a token
// (Azure/azure-sdk-for-python#41434, #37230). With one range (the default) the server never asks; with more
// (cosmos_ranges.cjs) the gateway's 400/1004 comes first and the SDK plans the query as on Azure.
const path = require("path");
const lib = path.join(process.argv[2], "@vercel", "cosmosdb-server", "lib");
// The SQL parser memoized (cosmos_query_parser.cjs): a nested query parses in linear time, not exponential.
require("./cosmos_query_parser.cjs").install(lib);
const { createHttpsServer } = require(lib);
const json = require(path.join(lib, "json"));
const port = parseInt(process.argv[3], 10);
const server = createHttpsServer({ keepAlive: true });
// An idle keep-alive connection stays open until its client closes it: one the server closed on a timer (5 s by
// default) could meet a request already on its way, which no client may send again (it might have been carried
// out). The clients' connections are dropped only by a fault (cosmos_faults.cjs).
server.keepAliveTimeout = 0;

const NOT_STREAMABLE = /\bORDER\s+BY\b|\bDISTINCT\b|\bGROUP\s+BY\b|\b(COUNT|SUM|MIN|MAX|AVG)\s*\(/i;
const REFUSAL =
  "Cross-partition query with ORDER BY, DISTINCT, GROUP BY or an aggregate resumed from a continuation " +
  "token: not supported by Azure Cosmos DB through the azure-cosmos SDK (README, Limitations: " +
  "'Continuation token support for aggregate cross-partition queries like sorting, counting, and " +
  "distinct'); page by keyset instead (docs/testing.md)";

const isTrue = (value) => String(value || "").toLowerCase() === "true";

// Only a cross-partition query carrying a continuation can be refused: only its body is read here.
const resumedCrossPartitionQuery = (req) => {
  const h = req.headers;
  return (
    req.method === "POST" &&
    (isTrue(h["x-ms-documentdb-isquery"]) || String(h["content-type"] || "").startsWith("application/query+json")) &&
    isTrue(h["x-ms-documentdb-query-enablecrosspartition"]) &&
    Boolean(h["x-ms-continuation"]) &&
    !h["x-ms-documentdb-partitionkey"] &&
    !h["x-ms-documentdb-partitionkeyrangeid"]
  );
};

// The server's handlers read a body through lib/json's default export: a body read here is handed to them.
const readJson = json.default;
json.default = async (req) => (req.guardBody !== undefined ? JSON.parse(req.guardBody) : readJson(req));

const [handle] = server.listeners("request");
server.removeAllListeners("request");
server.on("request", (req, res) => {
  if (!resumedCrossPartitionQuery(req)) {
    handle(req, res);
    return;
  }
  const chunks = [];
  const read = (fn) => (req.guardBody !== undefined ? fn() : req.on("end", fn)); // read already by cosmos_ranges.cjs
  req.on("data", (chunk) => chunks.push(chunk));
  read(() => {
    if (req.guardBody === undefined) req.guardBody = Buffer.concat(chunks).toString("utf8");
    let query = "";
    try {
      query = String(JSON.parse(req.guardBody).query || "");
    } catch (err) {
      query = "";
    }
    if (!NOT_STREAMABLE.test(query)) {
      handle(req, res);
      return;
    }
    res.statusCode = 400;
    res.setHeader("content-type", "application/json");
    res.setHeader("connection", "keep-alive");
    res.setHeader("x-ms-activity-id", require("crypto").randomUUID());
    res.setHeader("x-ms-request-charge", "1");
    res.end(JSON.stringify({ code: "BadRequest", message: REFUSAL }));
  });
});

// Azure Cosmos DB's rules the protocol server does not hold requests to (cosmos_guards.cjs).
require("./cosmos_guards.cjs").install(server, lib);
// More than one partition key range, as the gateway shows a partitioned container (cosmos_ranges.cjs; one by default).
const ranges = parseInt(process.argv[4] || "1", 10);
if (ranges > 1) require("./cosmos_ranges.cjs").install(server, lib, ranges);
// Time to live: items past their container's or their own ttl are gone (cosmos_ttl.cjs). Installed after the ranges,
// so the expired items are deleted before a query of one range sees its share of them.
require("./cosmos_ttl.cjs").install(server, lib);
// Service answers the SDK's retry policies act on (429, 449, 503, 410, timeouts), given on a test's request
// before any other handler sees the request (cosmos_faults.cjs; no rules: every request passes).
require("./cosmos_faults.cjs").install(server);
// Microsoft Entra ID only, as a deployed account (cosmos_auth.cjs; off unless a test sets it): checked first, as Azure
// authorizes a request before anything else.
require("./cosmos_auth.cjs").install(server);
// GET /_localrun/alive (a route no Cosmos DB client calls): answered before any other handler sees it, so no fault rule,
// token check or log touches it; the runner's liveness probe (cosmos_server.py, Liveness) asks it every few seconds.
const inner = server.listeners("request");
server.removeAllListeners("request");
server.on("request", (req, res) => {
  if (req.url === "/_localrun/alive" && req.method === "GET") {
    res.setHeader("content-type", "application/json");
    res.setHeader("connection", "keep-alive");
    res.end("{}");
    return;
  }
  inner.forEach((handle) => handle(req, res));
});
server.listen(port, "127.0.0.1", () => process.stdout.write(`listening ${server.address().port}\n`));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
