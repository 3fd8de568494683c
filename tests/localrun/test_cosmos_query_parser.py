"""The local Cosmos DB protocol server parses SQL with its query package's PEG parser memoized
(``localrun/cosmos_query_parser.cjs``). As shipped, that parser's time grows about sevenfold with each level of
parentheses: the supervisor's stray-documents query (``state_store.stray_page``, five levels) took 8 s to parse each
time it was sent, about a quarter of a 100-order simulation, and seven levels take minutes. The memoized parser must
give the same tree for every query, refuse the same queries at the same place, and answer nested queries at once."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "node_modules" / "@vercel" / "cosmosdb-server" / "lib"

# Each a feature of the grammar the app's queries use, or a mistake; the deepest only at four levels, which the
# shipped parser takes about a quarter of a second for.
QUERIES = [
    "SELECT * FROM c",
    "SELECT TOP @top * FROM c WHERE c.processState = @state AND c.completeBy <= @now ORDER BY c.completeBy, c.id",
    "SELECT VALUE COUNT(1) FROM c WHERE c.processState IN ('Pending', 'Processing') AND NOT IS_STRING(c.kind)",
    "SELECT c.id, c.history[0].at AS at FROM c JOIN h IN c.history WHERE ARRAY_CONTAINS(@ids, c.id, true)",
    "SELECT * FROM c WHERE (c.a = 1 OR (c.b > 2 AND (NOT IS_DEFINED(c.d) OR (c.e = 'x'))))",
    'SELECT * FROM c WHERE c.n BETWEEN -1 AND 0x10 AND c.s != "q" AND c.o = {"k": [1, 2.5, null, true]}',
    "select * from c where c.t ?? 'd' = 'd' order by c._ts desc",
    "SELECT * FROM c WHERE EXISTS (SELECT VALUE t FROM t IN c.tags WHERE t = @tag) -- a comment",
    "SELECT * FRM c",
    "SELECT * FROM c WHERE c.a = ",
    "SELECT * FROM c WHERE (c.a = 1",
    "SELECT * FROM c WHERE c.a = 'unterminated",
    "SELECT TOP * FROM c",
    "",
]

COMPARE = r"""
const [lib, queries] = [process.argv[1], JSON.parse(process.argv[2])];
const file = require.resolve("@zeit/cosmosdb-query/lib/parser", { paths: [lib] });
const shipped = require(file);
delete require.cache[file];
require(process.argv[3]).install(lib);
const memoized = require(file);
const outcome = (parser, query) => {
  try {
    return { tree: parser.parse(query) };
  } catch (err) {
    const { name, message, expected, found, location } = err;
    return { error: { syntax: err instanceof parser.SyntaxError, name, message, expected, found, location } };
  }
};
process.stdout.write(JSON.stringify({
  distinct: shipped !== memoized,
  outcomes: queries.map((q) => [outcome(shipped, q), outcome(memoized, q)]),
}));
"""


def _node() -> str:
    node = shutil.which("node")
    if node is None or not LIB.exists():
        pytest.fail("node and npm packages are required: `python3 dev.py setup` installs the npm packages")
    return node


def test_the_memoized_parser_gives_the_shipped_parsers_tree_and_errors() -> None:
    script = ROOT / "localrun" / "cosmos_query_parser.cjs"
    ran = subprocess.run(
        [_node(), "-e", COMPARE, str(LIB), json.dumps(QUERIES), str(script)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    answer = json.loads(ran.stdout)
    assert answer["distinct"], "the memoized parser must be a module of its own, not the shipped one again"
    refused = 0
    for query, (shipped, memoized) in zip(QUERIES, answer["outcomes"], strict=True):
        assert ("tree" in memoized) == ("tree" in shipped), query
        if "tree" in shipped:
            assert memoized == shipped, query
            continue
        refused += 1
        mine, theirs = memoized["error"], shipped["error"]
        assert mine["syntax"], f"{query!r}: the error is the parser's SyntaxError class"
        assert (mine["location"], mine["found"]) == (theirs["location"], theirs["found"]), query
        # the expected tokens listed: a memoized rule met again does not list its own again (cosmos_query_parser.cjs)
        listed = {json.dumps(e, sort_keys=True) for e in mine["expected"]}
        assert listed and listed <= {json.dumps(e, sort_keys=True) for e in theirs["expected"]}, query
    assert refused == 6  # the mistakes above: the comparison covers errors as well as trees


@pytest.fixture(scope="module")
def container(cosmos_server: Any) -> Iterator[Any]:
    from azure.cosmos import PartitionKey

    client = cosmos_server.fast_client()
    name = f"parse-{uuid.uuid4().hex[:8]}"
    db = client.create_database(name)
    c = db.create_container("items", partition_key=PartitionKey(path="/id"))
    for n in range(6):
        c.create_item({"id": f"i{n}", "n": n, "kind": "even" if n % 2 == 0 else None})
    yield c
    client.delete_database(name)


@pytest.mark.cosmos
def test_a_query_eight_parentheses_deep_is_answered(container: Any) -> None:
    # As shipped, the parser takes about 9 s at six levels and several minutes at eight (the test's timeout).
    nested = "((((((((c.n >= @low AND NOT IS_STRING(c.kind)) OR c.n = 0)))))))"
    query = f"SELECT * FROM c WHERE {nested} ORDER BY c.id"
    rows = container.query_items(query, parameters=[{"name": "@low", "value": 2}], enable_cross_partition_query=True)
    assert [row["id"] for row in rows] == ["i0", "i3", "i5"]


@pytest.mark.cosmos
def test_a_query_the_server_cannot_parse_is_still_a_400_naming_the_mistake(container: Any) -> None:
    from azure.cosmos.exceptions import CosmosHttpResponseError

    with pytest.raises(CosmosHttpResponseError) as refused:
        query = "SELECT * FROM c WHERE ((((((((c.n = 1)))))))) OR"
        list(container.query_items(query, enable_cross_partition_query=True))
    assert refused.value.status_code == 400
    assert "but end of input found" in str(refused.value.message)
