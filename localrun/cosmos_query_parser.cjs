// The protocol server's SQL parser (@zeit/cosmosdb-query, a PEG parser generated without pegjs's result cache)
// backtracks through every precedence level at each parenthesis, so its time grows about sevenfold with each level
// of nesting: `((c.a = 1))` parses in about 10 ms, five levels in 1.2 s, six in 9 s, and the supervisor's
// stray-documents query (state_store.stray_page, five levels) in 8 s, each time it is sent. Azure Cosmos DB has no
// such cost. This loads the same generated parser with each rule memoized per position, which is what pegjs
// generates with its `cache` option: the same tree, in time linear in the query. A query it refuses is refused at the
// same place, with the same `found`; its message may list fewer of the tokens expected there (a memoized rule met
// again does not record them again: the first time may have been inside a lookahead, which records none). Parsing a
// refused query again with the parser as shipped, for its longer list, would take minutes for a deep one.
// Installed before the server's modules load, so every query the server parses goes through it.
// Usage: require("./cosmos_query_parser.cjs").install(lib), lib: @vercel/cosmosdb-server's lib folder.
const fs = require("fs");
const Module = require("module");

// A rule of the generated parser: `  function peg$parseNAME() {`, two spaces deep inside `peg$parse`.
const RULE = /^ {2}function (peg\$parse\w+)\(\) \{$/gm;
const ENTRY = "function peg$parse(input, options) {";

function memoized(source) {
  const rules = [...source.matchAll(RULE)].map((match) => match[1]);
  if (rules.length === 0 || !source.includes(ENTRY)) {
    throw new Error("@zeit/cosmosdb-query's parser is not the generated PEG parser this memoizes: update localrun/cosmos_query_parser.cjs");
  }
  let index = 0;
  const wrapped = source.replace(RULE, (line, name) => {
    const rule = index++;
    // The wrapper takes the rule's name, its body moves to NAME$rule: the other rules call the wrapper.
    return (
      `  function ${name}() {\n` +
      `    var key = peg$currPos * ${rules.length} + ${rule}, cached = peg$resultsCache.get(key);\n` +
      `    if (cached !== undefined) { peg$currPos = cached.nextPos; return cached.result; }\n` +
      `    var result = ${name}$rule();\n` +
      `    peg$resultsCache.set(key, { nextPos: peg$currPos, result: result });\n` +
      `    return result;\n` +
      `  }\n` +
      `  function ${name}$rule() {`
    );
  });
  // One cache per parse: a position means something only in its own input.
  return wrapped.replace(ENTRY, `${ENTRY}\n  var peg$resultsCache = new Map();`);
}

function install(lib) {
  const file = require.resolve("@zeit/cosmosdb-query/lib/parser", { paths: [lib] });
  if (require.cache[file]) return; // loaded already (installed before)
  const parser = new Module(file, module);
  parser.filename = file;
  parser.paths = Module._nodeModulePaths(require("path").dirname(file));
  parser._compile(memoized(fs.readFileSync(file, "utf8")), file);
  parser.loaded = true;
  require.cache[file] = parser;
}

module.exports = { install, memoized };
