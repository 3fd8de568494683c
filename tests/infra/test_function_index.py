"""The function index the Functions host builds from function_app.py: it loads, names are unique,
and every binding's name is a parameter of the function it binds (generic over all blueprints)."""

from __future__ import annotations

from collections import Counter

from tests.infra.function_index import function_index


def test_the_index_loads_functions():
    assert function_index(), "function_app.app registered no functions"


def test_function_names_are_unique():
    counts = Counter(f["name"] for f in function_index())
    assert [name for name, n in counts.items() if n > 1] == []


def test_every_binding_name_is_a_parameter():
    missing = [
        f"{f['name']}: binding {b['name']!r} ({b['type']})"
        for f in function_index()
        for b in f["bindings"]
        if b["name"] != "$return" and b["name"] not in f["parameters"]
    ]
    assert missing == []


def test_every_parameter_is_bound():
    """A parameter with no binding fails at invocation, except the Service Bus settlement actions
    the SDK-type extension injects (annotated ServiceBusMessageActions)."""
    unbound = [
        f"{f['name']}: parameter {name!r}"
        for f in function_index()
        for name, annotation in f["parameters"].items()
        if name not in {b["name"] for b in f["bindings"]} and "MessageActions" not in annotation
    ]
    assert unbound == []


def test_each_function_has_exactly_one_trigger():
    wrong = [
        f"{f['name']}: {[b['type'] for b in f['bindings'] if b['type'].endswith('Trigger')]}"
        for f in function_index()
        if sum(b["type"].endswith("Trigger") for b in f["bindings"]) != 1
    ]
    assert wrong == []
