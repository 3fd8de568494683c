// Rules of Azure Cosmos DB that @vercel/cosmosdb-server does not hold a request to, held here for every
// client of the local server (the tests' fixtures and the runner both start it through cosmos_server.cjs).
// Each refusal names the documented rule it stands for; docs/testing.md lists what is still not enforced.
//
// - Per-item limits (learn.microsoft.com/azure/cosmos-db/concepts-limits, "Per-item limits"): an item is at
//   most 2 MB (the UTF-8 length of its JSON), its id at most 1,023 bytes, its partition key value at most
//   2,048 bytes (the containers use hash v2, large partition keys). A create, replace or upsert past one is
//   answered as Azure does: 413 for the size, 400 for the others. The server stored any of them. The size
//   is the body as sent: the service measures the JSON it receives, and the azure-cosmos SDK sends every
//   character past ASCII escaped (\uXXXX: up to 12 bytes for one emoji; Azure/azure-sdk-for-python#48914).
// - Cross-partition ORDER BY over values of more than one type (undefined, null, boolean, number, string,
//   array, object): the azure-cosmos SDK merges the partitions' sorted streams itself and raises on mixed
//   types ("Expected String, but got NoValue. Cannot execute cross partition order-by queries on mixed
//   types"; its README, "Limitations": "Cross-partition ORDER BY for mixed types"; one item without the
//   property is enough, Azure/azure-sdk-for-python#43965). The server has one partition and sorted them, and
//   silently left out the items the property is missing from. Such a query (no partition key, cross-partition
//   on) is answered 400 whenever the items it sorts (after WHERE, before TOP) hold more than one type of any
//   of its sort keys: on Azure it fails as soon as two partitions' next items differ, which a test cannot
//   count on never happening.
const path = require("path");
const { AsyncLocalStorage } = require("async_hooks");

const MAX_ITEM_BYTES = 2 * 1024 * 1024;
const MAX_ID_BYTES = 1023;
const MAX_PARTITION_KEY_BYTES = 2048;
const MIXED_TYPES =
  "Cannot execute cross partition order-by queries on mixed types (azure-cosmos README, Limitations: " +
  "'Cross-partition ORDER BY for mixed types'; Azure/azure-sdk-for-python#43965). Consider filtering " +
  "your query using IS_STRING or IS_NUMBER";

const bytes = (text) => Buffer.byteLength(String(text), "utf8");

const typeOf = (value) => {
  if (value === undefined) return "undefined";
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
};

const valueAt = (item, keys) => keys.reduce((v, key) => (v !== null && typeof v === "object" ? v[key] : undefined), item);

// What Azure refuses of a document written (create, replace, upsert; alone or in a batch), or null.
const itemRefusal = (collection, body) => {
  if (!body || typeof body !== "object" || body.id === undefined) return null; // the server's own 400
  if (bytes(body.id) > MAX_ID_BYTES) {
    return { statusCode: 400, body: { code: "BadRequest", message: `The id is longer than ${MAX_ID_BYTES} bytes (concepts-limits, per-item limits)` } };
  }
  const paths = ((collection.read() || {}).partitionKey || {}).paths || [];
  for (const p of paths) {
    const value = valueAt(body, p.slice(1).split("/"));
    if (value !== undefined && bytes(typeof value === "string" ? value : JSON.stringify(value)) > MAX_PARTITION_KEY_BYTES) {
      return {
        statusCode: 400,
        body: { code: "BadRequest", message: `The partition key value is longer than ${MAX_PARTITION_KEY_BYTES} bytes (concepts-limits, per-item limits)` }
      };
    }
  }
  if (bytes(JSON.stringify(body)) > MAX_ITEM_BYTES) {
    return {
      statusCode: 413,
      body: { code: "RequestEntityTooLarge", message: `Request size is too large: an item is at most ${MAX_ITEM_BYTES} bytes (concepts-limits, per-item limits)` }
    };
  }
  return null;
};

// A create, upsert, replace or batch of documents (not a query, which is a POST to the same path).
const writesDocuments = (req) => {
  const h = req.headers;
  const query = String(h["x-ms-documentdb-isquery"] || "").toLowerCase() === "true" || String(h["content-type"] || "").startsWith("application/query+json");
  return (req.method === "POST" || req.method === "PUT") && !query && /\/colls\/[^/]+\/docs(\/|$)/.test(req.url.split("?")[0]);
};

// A composite index serves its ORDER BY and the exact inverse of it, every direction flipped, as on Azure
// (azure/cosmos-db/index-policy, "Composite indexes": ORDER BY queries on multiple properties); the server's
// query library took only the index's own directions.
const flipped = { ascending: "descending", descending: "ascending" };
const withInverses = (indexes) => [
  ...indexes,
  ...indexes.map((index) => index.map((p) => ({ ...p, order: flipped[p.order || "ascending"] }))),
];

// Installs the guards into the server's modules (before a request is served) and around ``server``'s handler.
exports.install = (server, lib) => {
  const operations = require(path.join(lib, "handler", "_document-operations"));
  for (const name of ["createOperation", "replaceOperation", "upsertOperation"]) {
    const operation = operations[name];
    operations[name] = (collection, input) => itemRefusal(collection, input && input.resourceBody) || operation(collection, input);
  }

  const crossPartition = new AsyncLocalStorage();
  const helpers = require(require.resolve("@zeit/cosmosdb-query/lib/helpers", { paths: [lib] }));
  const sort = helpers.sort;
  helpers.sort = (collection, getRid, compositeIndexes, ...orders) => {
    if (orders.length && crossPartition.getStore()) {
      for (const [keys] of orders) {
        const types = new Set(collection.map((item) => typeOf(valueAt(item, keys))));
        if (types.size > 1) {
          throw new Error(`${MIXED_TYPES}: ORDER BY ${keys.join(".")} sorts ${[...types].sort().join(", ")} values`);
        }
      }
    }
    return sort(collection, getRid, compositeIndexes && withInverses(compositeIndexes), ...orders);
  };

  const handlers = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    const h = req.headers;
    if (writesDocuments(req) && Number(h["content-length"] || 0) > MAX_ITEM_BYTES) {
      req.resume(); // the body is not read: drained, so the connection can be used again
      res.statusCode = 413;
      res.setHeader("content-type", "application/json");
      res.setHeader("x-ms-activity-id", require("crypto").randomUUID());
      res.end(JSON.stringify({ code: "RequestEntityTooLarge", message: `Request size is too large: ${h["content-length"]} bytes, an item is at most ${MAX_ITEM_BYTES} (concepts-limits, per-item limits)` }));
      return;
    }
    const pk = h["x-ms-documentdb-partitionkey"];
    const across =
      String(h["x-ms-documentdb-query-enablecrosspartition"] || "").toLowerCase() === "true" &&
      (!pk || pk === "[{}]") &&
      !h["x-ms-documentdb-partitionkeyrangeid"];
    crossPartition.run(across, () => handlers.forEach((handle) => handle(req, res)));
  });
};
