// A container split into N physical partition key ranges, as the Cosmos DB gateway shows one past ~50 GB or
// 10,000 RU/s (docs/testing.md, "Partition key ranges"). @vercel/cosmosdb-server has one range and answers every
// cross-partition query itself, so the azure-cosmos SDK's own cross-partition machinery (its query plan, one query
// per range, the client-side merge of ORDER BY, TOP and aggregates: azure/cosmos/_execution_context/) never runs.
// With N > 1 (cosmos_server.cjs's third argument; CosmosServer(ranges=N)) every container answers as Azure's
// gateway does for a partitioned one:
//
// - GET .../pkranges: N ranges splitting the effective partition key space ("" to "FF") evenly, with an ETag; the
//   same request with If-None-Match of that ETag is a 304 (the SDK drains the ranges' change feed until one).
// - A cross-partition query (enablecrosspartition, no partition key, no range) with TOP, ORDER BY, an aggregate,
//   DISTINCT, GROUP BY or OFFSET/LIMIT: 400 with substatus 1004 ("can not be directly served by the gateway"),
//   which sends the SDK for a query plan. A streamable one (SELECT ... WHERE ...) is served across all ranges.
// - A query plan request (x-ms-cosmos-is-query-plan-request): {partitionedQueryExecutionInfoVersion, queryInfo,
//   queryRanges} with the gateway's fields (distinctType, top, offset, limit, orderBy, orderByExpressions,
//   groupByExpressions, aggregates, rewrittenQuery, hasSelectValue, ...); TOP @param is the parameter's value. The
//   rewritten ORDER BY query is the gateway's: SELECT c._rid, [{"item": <key>}, ...] AS orderByItems, c AS payload
//   ... WHERE ({documentdb-formattableorderbyquery-filter}) AND (<filter>); an aggregate's SELECT VALUE
//   [{"item": COUNT(1)}]. A feature the SDK does not list in x-ms-cosmos-supported-query-features (GROUP BY, an
//   aggregate outside SELECT VALUE) is the gateway's 400. DISTINCT, OFFSET/LIMIT and a SELECT list other than * or
//   VALUE under ORDER BY are refused 400 as not modelled here (no query of the app has one).
// - A query with x-ms-documentdb-partitionkeyrangeid: run on that range's documents only.
// GET /_localrun/ranges (a route no Cosmos DB client calls) answers what was served: {ranges, pkranges, notServable,
// plans, rangeQueries} counts (CosmosServer.range_counts), so a test can tell the SDK's per-range path ran.
//
// Not Azure's: a document's range is an FNV-1a hash of its partition key value (JSON) modulo N, not the range
// holding its effective partition key (MurmurHash3), so the SDK's own EPK of a key (feed_range_from_partition_key,
// hierarchical prefixes) does not name the range holding it; no query of the app asks. Ranges never split (no 410
// 1002 mid-query). The gateway narrows queryRanges to a filter on the partition key; here they are always all.
const crypto = require("crypto");

const NOT_STREAMABLE = /\bTOP\b|\bORDER\s+BY\b|\bDISTINCT\b|\bGROUP\s+BY\b|\bOFFSET\b|\b(COUNT|SUM|MIN|MAX|AVG)\s*\(/i;
const AGGREGATES = { COUNT: "Count", SUM: "Sum", MIN: "Min", MAX: "Max", AVG: "Average" };
const FILTER = "{documentdb-formattableorderbyquery-filter}";

const truthy = (value) => String(value || "").toLowerCase() === "true";

const fnv1a = (text) => {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, "utf8")) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
};

const valueAt = (item, keys) => keys.reduce((v, key) => (v !== null && typeof v === "object" ? v[key] : undefined), item);

// The range bounds: "" .. "FF" cut into n even slices of the 128-bit EPK space (hex, as the gateway writes them).
const bounds = (n) => {
  const top = 1n << 128n;
  const cut = (i) => (i === 0 ? "" : i === n ? "FF" : ((top * BigInt(i)) / BigInt(n)).toString(16).toUpperCase().padStart(32, "0"));
  return Array.from({ length: n }, (_, i) => ({ id: String(i), minInclusive: cut(i), maxExclusive: cut(i + 1) }));
};

// The clauses of a query's text: SELECT [DISTINCT] [TOP t] <select> FROM <from> [WHERE w] [GROUP BY g] [ORDER BY o]
// [OFFSET x LIMIT y]. Keywords inside string literals are not told apart (no query of the app has one).
const clauses = (sql) => {
  const m = /^\s*SELECT\s+(DISTINCT\s+)?(?:TOP\s+(\S+)\s+)?([\s\S]+?)\s+FROM\s+([\s\S]+?)(?:\s+WHERE\s+([\s\S]+?))?(?:\s+GROUP\s+BY\s+([\s\S]+?))?(?:\s+ORDER\s+BY\s+([\s\S]+?))?(?:\s+OFFSET\s+(\S+)\s+LIMIT\s+(\S+))?\s*$/i.exec(sql);
  if (!m) return null;
  const [, distinct, top, select, from, where, groupBy, orderBy, offset, limit] = m;
  return { distinct: Boolean(distinct), top, select, from, where, groupBy, orderBy, offset, limit };
};

const splitTop = (text) => {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i += 1) {
    const ch = text[i];
    if ("([{".includes(ch)) depth += 1;
    else if (")]}".includes(ch)) depth -= 1;
    else if (ch === "," && depth === 0) {
      parts.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  parts.push(text.slice(start).trim());
  return parts;
};

const numberOf = (token, parameters) => {
  if (token === undefined) return null;
  if (token.startsWith("@")) {
    const p = (parameters || []).find((x) => x.name === token);
    return p ? Number(p.value) : null;
  }
  return Number(token);
};

class Refusal extends Error {
  constructor(message) {
    super(message);
    this.refusal = true;
  }
}

// The gateway's query plan for ``body`` ({query, parameters}), or a Refusal (answered 400).
const queryPlan = (body, supported) => {
  const sql = String(body.query || "");
  const c = clauses(sql);
  if (!c) throw new Refusal(`cosmos_ranges.cjs cannot plan this query (not modelled): ${sql}`);
  const features = new Set(String(supported || "").split(",").map((f) => f.trim()));
  const alias = c.from.trim().split(/\s+/).pop();
  const value = /^VALUE\s+([\s\S]+)$/i.exec(c.select.trim());
  const aggregates = [];
  const aggregate = /^(COUNT|SUM|MIN|MAX|AVG)\s*\(([\s\S]*)\)$/i.exec(value ? value[1].trim() : "");
  if (aggregate) aggregates.push(AGGREGATES[aggregate[1].toUpperCase()]);
  else if (/\b(COUNT|SUM|MIN|MAX|AVG)\s*\(/i.test(c.select)) {
    const feature = c.groupBy ? "GroupBy" : "NonValueAggregate";
    if (!features.has(feature)) {
      throw new Refusal(
        `Query contains 1 or more unsupported features. Upgrade your SDK to a version that does support the requested ` +
          `features:\r\nQuery contained ${feature}, which the calling client does not support.`
      );
    }
  }
  if (c.groupBy && !features.has("GroupBy")) {
    throw new Refusal(
      "Query contains 1 or more unsupported features. Upgrade your SDK to a version that does support the requested " +
        "features:\r\nQuery contained GroupBy, which the calling client does not support."
    );
  }
  if (c.distinct || c.offset !== undefined || c.groupBy) {
    throw new Refusal(`cosmos_ranges.cjs does not model DISTINCT, GROUP BY or OFFSET/LIMIT across ranges: ${sql}`);
  }
  const sorts = c.orderBy ? splitTop(c.orderBy).map((s) => /^([\s\S]+?)(?:\s+(ASC|DESC))?$/i.exec(s)) : [];
  const orderBy = sorts.map((s) => (s[2] && s[2].toUpperCase() === "DESC" ? "Descending" : "Ascending"));
  const orderByExpressions = sorts.map((s) => s[1].trim());
  const top = c.top === undefined ? null : numberOf(c.top, body.parameters);
  let rewrittenQuery = "";
  if (sorts.length) {
    let payload;
    if (c.select.trim() === "*") payload = alias;
    else if (value && !aggregate) payload = value[1].trim();
    else throw new Refusal(`cosmos_ranges.cjs models ORDER BY across ranges only under SELECT * or SELECT VALUE: ${sql}`);
    const items = orderByExpressions.map((e) => `{"item": ${e}}`).join(", ");
    const where = c.where ? `(${FILTER}) AND (${c.where})` : `(${FILTER})`;
    rewrittenQuery =
      `SELECT ${c.top !== undefined ? `TOP ${c.top} ` : ""}${alias}._rid, [${items}] AS orderByItems, ${payload} AS payload\n` +
      `FROM ${c.from}\nWHERE ${where}\nORDER BY ${c.orderBy}`;
  } else if (aggregate) {
    rewrittenQuery =
      `SELECT VALUE [{"item": ${aggregate[0]}}]\nFROM ${c.from}` + (c.where ? `\nWHERE (${c.where})` : "");
  }
  return {
    partitionedQueryExecutionInfoVersion: 2,
    queryInfo: {
      distinctType: "None",
      top,
      offset: null,
      limit: null,
      orderBy,
      orderByExpressions,
      groupByExpressions: [],
      groupByAliases: [],
      aggregates,
      groupByAliasToAggregateType: {},
      rewrittenQuery,
      hasSelectValue: Boolean(value),
      dCountInfo: null,
      hasNonStreamingOrderBy: false
    },
    queryRanges: [{ min: "", max: "FF", isMinInclusive: true, isMaxInclusive: false }]
  };
};

// A per-range query of a rewritten aggregate (SELECT VALUE [{"item": AGG(...)}] ...): the server's SQL cannot build
// an array around an aggregate, so it runs SELECT VALUE AGG(...) and wraps the value as the gateway's backend does.
const WRAPPED_AGGREGATE = /^(\s*SELECT\s+VALUE\s+)\[\{"item":\s*([\s\S]+?)\}\](\s+FROM\s[\s\S]*)$/i;

const answer = (res, statusCode, body, headers = {}) => {
  res.statusCode = statusCode;
  res.setHeader("content-type", "application/json");
  res.setHeader("connection", "keep-alive");
  res.setHeader("x-ms-activity-id", crypto.randomUUID());
  res.setHeader("x-ms-request-charge", "1");
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.end(body === null ? undefined : JSON.stringify(body));
};

const readBody = (req) =>
  new Promise((resolve) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });

// Installs the ranges around ``server``'s handler (n > 1). ``lib``: @vercel/cosmosdb-server's lib directory.
exports.install = (server, lib, n) => {
  const path = require("path");
  const { AsyncLocalStorage } = require("async_hooks");
  const Documents = require(path.join(lib, "account", "documents")).default;
  const ranges = bounds(n);
  const etag = `"${n}-ranges"`;
  const inRange = new AsyncLocalStorage();
  const counts = { ranges: n, pkranges: 0, notServable: 0, plans: 0, rangeQueries: 0 };

  // A query on one range sees only the documents whose partition key value hashes to it.
  const query = Documents.prototype.query;
  Documents.prototype.query = function rangeQuery(params, options) {
    const range = inRange.getStore();
    if (range === undefined) return query.call(this, params, options);
    const all = this._data;
    const paths = (((this._parent.read() || {}).partitionKey || {}).paths || ["/id"]).map((p) => p.slice(1).split("/"));
    const rangeOf = (doc) => fnv1a(JSON.stringify(paths.map((keys) => valueAt(doc, keys)))) % n;
    this._data = new Map([...all].filter(([, item]) => rangeOf(item.read()) === range));
    try {
      const wrapped = WRAPPED_AGGREGATE.exec(String(params.query || ""));
      if (!wrapped) return query.call(this, params, options);
      const result = query.call(this, { ...params, query: wrapped[1] + wrapped[2] + wrapped[3] }, options);
      if (!result || !result.result) return result;
      const v = result.result[0];
      return { ...result, result: [[v === undefined ? {} : { item: v }]] };
    } finally {
      this._data = all;
    }
  };

  const handlers = server.listeners("request");
  server.removeAllListeners("request");
  const pass = (req, res, range) => inRange.run(range, () => handlers.forEach((handle) => handle(req, res)));
  server.on("request", (req, res) => {
    const url = req.url.split("?")[0].replace(/\/+$/, "");
    const h = req.headers;
    const coll = /^\/dbs\/([^/]+)\/colls\/([^/]+)/.exec(url);
    if (url === "/_localrun/ranges" && req.method === "GET") {
      answer(res, 200, counts);
      return;
    }
    if (coll && req.method === "GET" && /\/pkranges$/.test(url)) {
      counts.pkranges += 1;
      if (h["if-none-match"] === etag) {
        answer(res, 304, null, { etag });
        return;
      }
      const rid = crypto.createHash("sha1").update(url).digest("base64").slice(0, 8);
      const listed = ranges.map((r) => ({
        ...r,
        ridPrefix: Number(r.id),
        throughputFraction: 1 / n,
        status: "online",
        parents: [],
        _rid: `${rid}${r.id}`,
        _etag: `"${r.id}"`,
        _ts: 0
      }));
      answer(res, 200, { _rid: rid, PartitionKeyRanges: listed, _count: listed.length }, { etag, "x-ms-item-count": String(n) });
      return;
    }
    const isQuery =
      req.method === "POST" &&
      coll &&
      /\/docs$/.test(url) &&
      (truthy(h["x-ms-documentdb-isquery"]) || truthy(h["x-ms-cosmos-is-query-plan-request"]) || String(h["content-type"] || "").startsWith("application/query+json"));
    if (!isQuery) {
      pass(req, res, undefined);
      return;
    }
    const rangeHeader = h["x-ms-documentdb-partitionkeyrangeid"];
    if (rangeHeader) {
      const id = Number(String(rangeHeader).split(",").pop());
      if (!Number.isInteger(id) || id < 0 || id >= n) {
        answer(res, 410, { code: "Gone", message: `partition key range ${rangeHeader} is gone` }, { "x-ms-substatus": "1002" });
        return;
      }
      counts.rangeQueries += 1;
      // a range is a scope of its own, as a partition key is (a feed range's query names no key and no cross-partition)
      req.headers["x-ms-documentdb-query-enablecrosspartition"] = "true";
      pass(req, res, id);
      return;
    }
    const planRequest = truthy(h["x-ms-cosmos-is-query-plan-request"]);
    const pk = h["x-ms-documentdb-partitionkey"];
    const across = truthy(h["x-ms-documentdb-query-enablecrosspartition"]) && (!pk || pk === "[{}]");
    if (!planRequest && !across) {
      pass(req, res, undefined);
      return;
    }
    readBody(req).then((text) => {
      let body = {};
      try {
        body = JSON.parse(text);
      } catch (err) {
        body = {};
      }
      if (planRequest) {
        counts.plans += 1;
        try {
          answer(res, 200, queryPlan(body, h["x-ms-cosmos-supported-query-features"]));
        } catch (err) {
          if (!err.refusal) throw err;
          answer(res, 400, { code: "BadRequest", message: err.message });
        }
        return;
      }
      if (NOT_STREAMABLE.test(String(body.query || ""))) {
        counts.notServable += 1;
        answer(
          res,
          400,
          {
            code: "BadRequest",
            message:
              "The provided cross partition query can not be directly served by the gateway. This is a first chance " +
              "(internal) exception that all newer clients will know how to handle gracefully."
          },
          { "x-ms-substatus": "1004" }
        );
        return;
      }
      req.guardBody = text; // read here: handed to the server's handlers (cosmos_server.cjs's json reader)
      pass(req, res, undefined);
    });
  });
};
