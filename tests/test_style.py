"""Style rules of the production code that a linter does not enforce here, checked on its syntax tree.

No ``assert`` statement: ``python -O`` strips them, so an ``assert`` that narrows a type or guards a
path would silently stop guarding it. Production code checks explicitly and raises an error that
says what went wrong (or is typed so that no narrowing is needed). Tests, ``localrun`` and
``tools`` may assert freely.

No ``datetime.isoformat()``: a time the app writes for people and clients goes through ``domain.timefmt.to_text``
(``...000000Z``), not ``isoformat``'s ``+00:00``; only an alert id's ``discriminator`` keeps it (an id must not
change across an upgrade). A datetime put into an f-string or ``str()`` as is has no check here (it needs types):
``timefmt``'s docstring says the rule."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from tests.test_layers import ROOT, production_files


def asserts_in(source: str, filename: str) -> list[str]:
    """``file:line`` of every ``assert`` statement in ``source``."""
    tree = ast.parse(source, filename=filename)
    lines = sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert))
    return [f"{filename}:{line}" for line in lines]


def in_production(root: Path, check: Callable[[str, str], list[str]]) -> list[str]:
    """What ``check`` (source, file name) finds in every production file under ``root``."""
    found: list[str] = []
    for path in production_files(root):
        found += check(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    return found


def production_asserts(root: Path) -> list[str]:
    return in_production(root, asserts_in)


def test_production_code_has_no_assert_statement() -> None:
    assert production_asserts(ROOT) == [], "replace each with an explicit check that raises a meaningful error"


def test_the_check_finds_an_assert_wherever_it_stands(tmp_path: Path) -> None:
    package = tmp_path / "roles"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "narrowing.py").write_text(
        "def first(items: list[int] | None) -> int:\n"
        "    if items:\n"
        "        return items[0]\n"
        "    for item in ():\n"
        "        assert item is not None\n"
        "    assert items is not None, 'no items'\n"
        "    return 0\n"
    )
    (package / "clean.py").write_text(
        "def check(x: int | None) -> None:\n    if x is None:\n        raise ValueError()\n"
    )
    # tests and the local runner are above production code: they may assert
    for above in ("tests", "localrun", "tools"):
        (tmp_path / above).mkdir()
        (tmp_path / above / "__init__.py").write_text("")
        (tmp_path / above / "test_it.py").write_text("assert 1 + 1 == 2\n")

    assert production_asserts(tmp_path) == ["roles/narrowing.py:5", "roles/narrowing.py:6"]


def test_a_string_that_mentions_assert_is_not_an_assert() -> None:
    assert asserts_in('message = "assert x"  # assert in a comment\n', "m.py") == []


def isoformat_calls_in(source: str, filename: str) -> list[str]:
    """``file:line`` of every ``.isoformat(...)`` call in ``source`` but those inside a ``discriminator=`` argument."""
    tree = ast.parse(source, filename=filename)
    ids = [k.value for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "discriminator"]
    in_ids = {id(node) for value in ids for node in ast.walk(value)}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and id(n) not in in_ids]
    lines = sorted(n.lineno for n in calls if isinstance(n.func, ast.Attribute) and n.func.attr == "isoformat")
    return [f"{filename}:{line}" for line in lines]


def test_production_code_writes_times_with_timefmt_not_isoformat() -> None:
    assert in_production(ROOT, isoformat_calls_in) == [], "write domain.timefmt.to_text(moment) (an id: see timefmt)"


def test_the_isoformat_check_finds_a_call_anywhere_but_an_alert_ids_discriminator() -> None:
    source = (
        "def f(at, until, send):\n"
        "    send(summary=f'since {at.isoformat()}', details={'at': at.isoformat(timespec=\"seconds\")},\n"
        "         discriminator=f'x@{at.isoformat()}')\n"
        "    return datetime.fromisoformat(until), until.isoformat() if until else None\n"
    )
    assert isoformat_calls_in(source, "m.py") == ["m.py:2", "m.py:2", "m.py:4"]


def test_dev_py_parses_as_the_oldest_python_it_promises_to_run_on() -> None:
    """``dev.py`` runs on whatever ``python3`` a fresh machine has (3.9 and later: it then builds the
    3.13 ``.venv``), so it may not use newer syntax (a ``type`` statement, ``except*``, PEP 695
    generics); a fresh clone's CI once stopped at its first line for one."""
    source = (ROOT / "dev.py").read_text(encoding="utf-8")
    assert "any Python 3.9+" in source  # the promise this test holds it to
    ast.parse(source, filename="dev.py", feature_version=(3, 9))


def test_the_dev_py_check_refuses_newer_syntax() -> None:
    try:
        ast.parse("type Measured = tuple[float, int]\n", feature_version=(3, 9))
    except SyntaxError:
        return
    raise AssertionError("a type statement parsed as Python 3.9")
