// Microsoft Entra ID access as a deployed account has it (infra/modules/cosmos.bicep: disableLocalAuth, the app's
// identity given the Cosmos DB Built-in Data Contributor role), held by the protocol server when a test asks: the
// server itself takes any Authorization header. Off until set; then every Cosmos DB request is refused unless its
// token would be taken by Azure:
// - a key-signed request (type=master): 401, "Local Authorization is disabled" (disableLocalAuth);
// - type=aad whose token has expired (exp), or is for another audience than the account's (aud): 401;
// - a token for a principal (appid, or oid) without the role: 403, substatus 5301;
// - a token for a principal given Cosmos DB Built-in Data Reader instead ("readers"): reads and queries answered, a
//   document created, replaced, upserted, patched or deleted 403, substatus 5301 (the action it lacks named);
// - a database or container created, replaced or deleted (the data plane's metadata writes, which the data role
//   does not grant: they go through Azure Resource Manager, i.e. the Bicep): 403, substatus 5300.
// The token is read as a JWT (header.payload.signature, base64url): its payload's exp, aud, appid/oid; its signature
// is not checked (the tests' identity endpoint, tests/identity/endpoint.py, signs nothing).
//
// Set by whoever started the server (CosmosServer.set_auth), on a route no Cosmos DB client calls:
// POST /_localrun/auth {"principals": [...], "audiences": [...], "readers": [...]} turns it on (and empties the log);
// {} turns it off.
// GET answers {"principals", "audiences", "key": key-signed requests, "aad": token requests, "tokens": distinct
// tokens seen, "refused": [{"status", "substatus", "reason", "method", "path"}]}.
const crypto = require("crypto");

const ROUTE = "/_localrun/auth";
const LOCAL_AUTH_DISABLED = "Local Authorization is disabled. Use an AAD token to authorize all requests.";

const claimsOf = (token) => {
  try {
    return JSON.parse(Buffer.from(String(token).split(".")[1], "base64url").toString("utf8"));
  } catch (err) {
    return null;
  }
};

// A database or container created, replaced or deleted (not a document, not a read).
const metadataWrite = (req) => {
  const path = req.url.split("?")[0].replace(/\/+$/, "");
  return req.method !== "GET" && (/^\/dbs(\/[^/]+)?$/.test(path) || /^\/dbs\/[^/]+\/colls(\/[^/]+)?$/.test(path));
};

// A query (a POST the data reader role allows), not a write.
const query = (req) =>
  req.method === "POST" &&
  (String(req.headers["x-ms-documentdb-isquery"]).toLowerCase() === "true" ||
    String(req.headers["content-type"] || "").startsWith("application/query+json"));

exports.install = (server) => {
  let policy = null; // {principals, audiences, readers} when on
  let log = { key: 0, aad: 0, tokens: new Set(), refused: [] };

  const control = (req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      if (req.method === "POST") {
        const given = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
        policy = given.principals
          ? { principals: given.principals, audiences: given.audiences || [], readers: given.readers || [] }
          : null;
        log = { key: 0, aad: 0, tokens: new Set(), refused: [] };
      }
      res.end(JSON.stringify({ ...(policy || {}), key: log.key, aad: log.aad, tokens: log.tokens.size, refused: log.refused }));
    });
  };

  // Why Azure would refuse the request, or null.
  const refusal = (req) => {
    let header = String(req.headers.authorization || "");
    try {
      header = decodeURIComponent(header);
    } catch (err) {
      // left as sent
    }
    const fields = Object.fromEntries(header.split("&").map((pair) => [pair.split("=")[0], pair.slice(pair.indexOf("=") + 1)]));
    if (fields.type !== "aad") {
      log.key += 1;
      return [401, 0, LOCAL_AUTH_DISABLED];
    }
    log.aad += 1;
    log.tokens.add(fields.sig);
    const claims = claimsOf(fields.sig);
    if (claims === null) return [401, 0, "The input authorization token can't serve the request: not a JWT"];
    if (!(Number(claims.exp) > Date.now() / 1000)) return [401, 0, `The token has expired (exp ${claims.exp})`];
    if (!policy.audiences.includes(claims.aud)) return [401, 0, `The token's audience ${claims.aud} is not this account's`];
    const principal = claims.appid || claims.oid;
    if (policy.readers.includes(principal) && req.method !== "GET" && !query(req)) {
      return [
        403,
        5301,
        `Request blocked by Auth: principal [${principal}] does not have required RBAC permissions to perform action ` +
          "[Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/write] on resource [" +
          `${req.url.split("?")[0]}]`
      ];
    }
    if (!policy.principals.includes(principal) && !policy.readers.includes(principal)) {
      return [403, 5301, `Request blocked by Auth: principal [${principal}] does not have required RBAC permissions`];
    }
    if (metadataWrite(req)) {
      return [
        403,
        5300,
        `Operation '${req.method}' on resource '${req.url.split("?")[0]}' is not allowed through Azure Cosmos DB endpoint. ` +
          "Please switch on such operations for your account, or perform this operation through Azure Resource Manager"
      ];
    }
    return null;
  };

  const handlers = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    const path = req.url.split("?")[0];
    if (path === ROUTE) {
      control(req, res);
      return;
    }
    const refused = policy === null || path.startsWith("/_localrun/") ? null : refusal(req);
    if (refused === null) {
      handlers.forEach((handle) => handle(req, res));
      return;
    }
    const [status, substatus, reason] = refused;
    log.refused.push({ status, substatus, reason, method: req.method, path });
    req.resume(); // not read: drained, so the connection serves the next request
    req.on("end", () => {
      res.statusCode = status;
      res.setHeader("content-type", "application/json");
      res.setHeader("x-ms-activity-id", crypto.randomUUID());
      res.setHeader("x-ms-substatus", String(substatus));
      res.end(JSON.stringify({ code: status === 401 ? "Unauthorized" : "Forbidden", message: reason }));
    });
  });
};
