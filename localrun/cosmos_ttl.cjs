// Time to live, as Azure Cosmos DB documents it for the NoSQL API ("Time to Live (TTL) in Azure Cosmos DB",
// learn.microsoft.com/azure/cosmos-db/time-to-live; "Configure time to live", .../how-to-time-to-live).
// @vercel/cosmosdb-server stores a container's defaultTtl and an item's ttl and never expires anything.
//
// - The container's defaultTtl: missing or null, TTL is off and no item expires, whatever its ttl ("If TTL isn't
//   set on a container, then the time to live on an item in this container has no effect"); -1, TTL is on and an
//   item without ttl never expires; n > 0, an item without ttl expires n seconds after its last modification.
//   Any other value (0, below -1, past 2,147,483,647, not an integer) is refused 400 on a create or replace of
//   the container ("A valid value must be either a nonzero positive integer, '-1' or null":
//   ContainerProperties.DefaultTimeToLive).
// - An item's ttl (seconds) overrides the container's, only while the container has one: n > 0 expires the item
//   n seconds after its last modification (its _ts), -1 never. Any other ttl (null, 0, below -1, past
//   2,147,483,647, a fraction, text) is refused 400 on a create, replace, upsert or patch (alone or in a batch), as
//   Azure refuses it ("Setting TTL to null on an item isn't supported. The item TTL value must be a nonzero positive
//   integer less than or equal to 2147483647, or -1"; the service's answer: "The input ttl '0' is invalid. Ensure to
//   provide a nonzero positive integer less than or equal to '2147483647', or '-1' which means never expire.",
//   MicrosoftDocs/azure-docs#107151, Azure/azure-cosmos-dotnet-v3#620). The server stored it and kept the item for
//   ever. Refused in every container, TTL on or off: Azure's reports are of containers with TTL on, and no report
//   says a container without it takes one; refusing both is the stricter reading (no document of the app but the
//   alert marks has a ttl: tests/notifications/test_alert_marks_expire.py).
// - An item expires once its _ts + ttl is reached. Azure deletes it in the background, and "the item will no
//   longer appear in query responses immediately after the TTL expires, even if it isn't yet permanently deleted":
//   here it is deleted before any request to its container is carried out (a point read, a query, a read feed, a
//   create, replace, upsert, patch, delete or batch), so no answer holds it and its id is free again. Not modelled:
//   on Azure one not yet deleted shows again if the container's TTL is turned off (MicrosoftDocs/azure-docs#24025).
// - A container's defaultTtl may be set on an existing container (the portal's "Time to Live" setting; a Bicep
//   deployment of the same container): a replace of the container here keeps its items, as Azure does. The
//   protocol server's own replace dropped every item of the container.
//
// The server's clock: Date.now of this process (the _ts of every write, the time items expire by), moved forward
// for tests by POST /_localrun/clock {"offsetSeconds": n} (a route no Cosmos DB client calls; GET answers
// {"offsetSeconds", "now"}). It moves everything that reads Date.now here: a token's expiry too (cosmos_auth.cjs).
const path = require("path");

const ROUTE = "/_localrun/clock";
const MAX_TTL = 2147483647;

const isTtl = (value) => Number.isInteger(value) && (value === -1 || (value > 0 && value <= MAX_TTL));
// The answer to a document whose own ttl is none (Azure's words), or null: none, or a valid one.
const ttlRefusal = (doc) => {
  if (doc === null || typeof doc !== "object" || !Object.prototype.hasOwnProperty.call(doc, "ttl") || isTtl(doc.ttl)) return null;
  const shown = typeof doc.ttl === "string" ? doc.ttl : JSON.stringify(doc.ttl);
  return `The input ttl '${shown}' is invalid. Ensure to provide a nonzero positive integer less than or equal to '${MAX_TTL}', or '-1' which means never expire.`;
};
const ttlOn = (collection) => collection !== undefined && collection !== null && isTtl(collection.defaultTtl);

// When ``doc`` expires in a container whose TTL is on (``defaultTtl``), in seconds since the epoch; Infinity: never.
const expiresAt = (defaultTtl, doc) => {
  const ttl = isTtl(doc.ttl) ? doc.ttl : defaultTtl;
  return ttl === -1 ? Infinity : Number(doc._ts) + ttl;
};

const answer = (res, status, body) => {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.setHeader("connection", "keep-alive");
  res.setHeader("x-ms-activity-id", require("crypto").randomUUID());
  res.setHeader("x-ms-request-charge", "1");
  res.end(JSON.stringify(body));
};

exports.install = (server, lib) => {
  const Documents = require(path.join(lib, "account", "documents")).default;
  const Collections = require(path.join(lib, "account", "collections")).default;
  const getValue = require(path.join(lib, "utils", "get-value")).default;

  const realNow = Date.now;
  let offsetMs = 0;
  Date.now = () => realNow() + offsetMs;

  // The items that carry a ttl of their own, by container (a container with defaultTtl -1 expires only those).
  const withTtl = new WeakMap();
  const tracked = (docs) => {
    if (!withTtl.has(docs)) withTtl.set(docs, new Set());
    return withTtl.get(docs);
  };
  const set = Documents.prototype._set;
  Documents.prototype._set = function setTracked(data) {
    const written = set.call(this, data);
    if (isTtl(written.ttl) && written.ttl !== -1) tracked(this).add(written._rid);
    else tracked(this).delete(written._rid);
    return written;
  };

  // An item written with a ttl that is none: 400. A create, replace or upsert (alone or in a batch) is answered before
  // it is carried out; a patch's result is refused by the replace it is written with (its 400 answer).
  const operations = require(path.join(lib, "handler", "_document-operations"));
  for (const name of ["createOperation", "replaceOperation", "upsertOperation"]) {
    const operation = operations[name];
    operations[name] = (collection, input) => {
      const refused = ttlRefusal(input && input.resourceBody);
      return refused === null ? operation(collection, input) : { statusCode: 400, body: { code: "BadRequest", message: refused } };
    };
  }
  const replaceItem = Documents.prototype.replace;
  Documents.prototype.replace = function replaceChecked(data, original) {
    const refused = ttlRefusal(data);
    if (refused !== null) throw Object.assign(new Error(refused), { badRequest: true });
    return replaceItem.call(this, data, original);
  };

  // Deletes the expired items of ``docs`` (their rids and unique keys out of the indexes, as Items.delete does).
  let purging = false;
  const purge = (docs) => {
    const collection = docs._parent.read();
    if (purging || !ttlOn(collection)) return;
    purging = true;
    try {
      const now = Date.now() / 1000;
      const rids = collection.defaultTtl === -1 ? [...tracked(docs)] : [...docs._data.keys()];
      for (const rid of rids) {
        const item = docs._data.get(rid);
        if (item === undefined) {
          tracked(docs).delete(rid);
          continue;
        }
        const doc = item.read();
        if (expiresAt(collection.defaultTtl, doc) > now) continue;
        for (const keyPath of docs._uniqueKeyPaths) {
          docs._index.delete(docs._getId(keyPath, getValue(keyPath.slice(1).split("/"), doc), docs._getPartition(doc)));
        }
        docs._data.delete(rid);
        tracked(docs).delete(rid);
      }
    } finally {
      purging = false;
    }
  };
  // Every way to an item: a point read or a write finds it by id (_item), a query or a read feed reads them all.
  for (const name of ["_item", "query", "read"]) {
    const own = Documents.prototype[name];
    Documents.prototype[name] = function expiring(...args) {
      purge(this);
      return own.apply(this, args);
    };
  }

  // A replace of a container keeps its items (and their functions, ranges), under the container's new properties.
  const replace = Collections.prototype.replace;
  Collections.prototype.replace = function replaceKeepingItems(data, original) {
    const before = this._item("/id", original.id, this._getPartition(original));
    const replaced = replace.call(this, data, original);
    const after = this._item("/id", replaced.id, this._getPartition(replaced));
    if (before.read() && after.read() && before !== after) {
      for (const part of ["documents", "userDefinedFunctions", "partitionKeyRanges"]) {
        after[part] = before[part];
        after[part]._parent = after;
      }
    }
    return replaced;
  };

  const control = (req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      if (req.method === "POST") {
        try {
          const offset = JSON.parse(Buffer.concat(chunks).toString("utf8")).offsetSeconds;
          if (typeof offset !== "number" || !Number.isFinite(offset)) throw new Error("offsetSeconds: a number expected");
          offsetMs = offset * 1000;
        } catch (err) {
          answer(res, 400, { message: String(err.message) });
          return;
        }
      }
      answer(res, 200, { offsetSeconds: offsetMs / 1000, now: Date.now() / 1000 });
    });
  };

  // A create (POST .../colls) or replace (PUT .../colls/<id>) of a container: its defaultTtl checked first.
  const containerWrite = (req) => {
    const url = req.url.split("?")[0].replace(/\/+$/, "");
    return (req.method === "POST" && /^\/dbs\/[^/]+\/colls$/.test(url)) || (req.method === "PUT" && /^\/dbs\/[^/]+\/colls\/[^/]+$/.test(url));
  };

  const handlers = server.listeners("request");
  server.removeAllListeners("request");
  const pass = (req, res) => handlers.forEach((handle) => handle(req, res));
  server.on("request", (req, res) => {
    if (req.url.split("?")[0] === ROUTE) {
      control(req, res);
      return;
    }
    if (!containerWrite(req)) {
      pass(req, res);
      return;
    }
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      req.guardBody = Buffer.concat(chunks).toString("utf8"); // the handler reads it from here (cosmos_server.cjs)
      let body = null;
      try {
        body = JSON.parse(req.guardBody);
      } catch (err) {
        body = null;
      }
      const ttl = body && typeof body === "object" ? body.defaultTtl : undefined;
      if (ttl !== undefined && ttl !== null && !isTtl(ttl)) {
        answer(res, 400, {
          code: "BadRequest",
          message: `The value of defaultTtl '${JSON.stringify(ttl)}' is invalid: a nonzero positive integer up to ${MAX_TTL}, -1 or null (ContainerProperties.DefaultTimeToLive)`
        });
        return;
      }
      pass(req, res);
    });
  });
};
