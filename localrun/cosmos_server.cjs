// Starts @vercel/cosmosdb-server through its API with HTTP keep-alive on (its CLI answers every
// request with "Connection: close", so each call would pay a new TLS handshake), on loopback only.
// Usage: node cosmos_server.cjs <node_modules dir> <port>
const path = require("path");
const { createHttpsServer } = require(path.join(process.argv[2], "@vercel", "cosmosdb-server"));
const port = parseInt(process.argv[3], 10);
createHttpsServer({ keepAlive: true }).listen(port, "127.0.0.1");
