// Starts @vercel/cosmosdb-server through its API with HTTP keep-alive on (its CLI answers every
// request with "Connection: close", so each call would pay a new TLS handshake), on loopback only.
// Usage: node cosmos_server.cjs <node_modules dir> <port>; port 0: a free port the system picks at
// listen time. Prints "listening <port>" once it listens. Exits when its stdin ends: the process that
// started it holds the other end, so the server never outlives it, even when that process is killed.
const path = require("path");
const { createHttpsServer } = require(path.join(process.argv[2], "@vercel", "cosmosdb-server"));
const port = parseInt(process.argv[3], 10);
const server = createHttpsServer({ keepAlive: true });
// Azure Cosmos DB's rules the protocol server does not hold requests to (cosmos_guards.cjs).
require("./cosmos_guards.cjs").install(server, path.join(process.argv[2], "@vercel", "cosmosdb-server", "lib"));
server.listen(port, "127.0.0.1", () => process.stdout.write(`listening ${server.address().port}\n`));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
