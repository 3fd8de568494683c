"""The log search alert rules of infra/modules/alerts.bicep, run as Azure Monitor runs them, on rows of ``AppTraces``
(``tests/observability/exported.py``: the app's records as the real exporter stores them).

The query: ``AppTraces``, then ``where`` and ``extend`` steps whose expressions use ``tostring(Properties.x)``,
``coalesce``, ``==``, ``!=``, ``in``/``!in``, ``and``, ``or``: translated to Python, anything else refused (the
model cannot vouch for it). The rule (``Count`` of the rows, ``GreaterThan`` a threshold): every
``evaluationFrequency`` the query runs over the last ``windowSize``; with ``dimensions`` the rows are counted per
combination of the dimension columns' values, each its own alert. With ``failingPeriods`` (``numberOfEvaluationPeriods``
N, ``minFailingPeriodsToAlert`` M; "the number of aggregated lookback points. The lookback time window is calculated
based on the aggregation granularity (windowSize) and the selected number of aggregated points", Azure Monitor's
``ConditionFailingPeriods``): the last N ``windowSize`` periods before the evaluation, the condition met in at
least M of them. Stateful (``autoMitigate``,
true unless set false) as Microsoft Learn, *Azure Monitor alerts overview* (Alerts and state) and *Create or
edit a log search alert rule* (Automatically resolve alerts) describe it: an alert fires when its condition is
met and "won't fire again or trigger any more actions until the conditions are resolved"; a log search alert is
resolved when its condition is not met for 10 minutes (frequency 1 minute), three frequency periods (5 to 15
minutes: 15 is read as two, the shorter), two (15 minutes to 11 hours), one (11 to 12 hours). Stateless
(``autoMitigate: false``): it fires on every evaluation whose condition is met, its actions muted for
``muteActionsDuration`` after it fired. A page is a fired alert (the action group's email)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.infra.paths import MODULES
from tools.bicepcheck.query import load, resources

Row = Mapping[str, str]  # the Properties of one AppTraces row


def _minutes(value: str) -> int:
    match = re.fullmatch(r"P(?:(\d+)D)?T?(?:(\d+)H)?(?:(\d+)M)?", value)
    assert match and value not in ("P", "PT"), f"not a duration the model reads: {value!r}"
    days, hours, minutes = (int(g or 0) for g in match.groups())
    return days * 1440 + hours * 60 + minutes


def _coalesce(*values: str) -> str:
    return next((v for v in values if v), "")


_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.In,
    ast.NotIn,
    ast.Call,
    ast.Name,
    ast.Attribute,
    ast.Load,
    ast.Constant,
    ast.List,
)


def _expression(kql: str) -> Callable[[Row], str | bool]:
    text = re.sub(r"tostring\(\s*Properties\.(\w+)\s*\)", r'P.get("\1", "")', kql)
    text = re.sub(r"tostring\(\s*Properties\[['\"](\w+)['\"]\]\s*\)", r'P.get("\1", "")', text)
    text = re.sub(r"!in\s*\(([^()]*)\)", r"not in [\1]", text)
    text = re.sub(r"\bin\s*\(([^()]*)\)", r"in [\1]", text)
    text = text.replace("coalesce(", "_coalesce(")
    tree = ast.parse(text.strip(), mode="eval")
    for node in ast.walk(tree):
        assert isinstance(node, _ALLOWED), f"the model does not read {ast.dump(node)} in {kql!r}"
        if isinstance(node, ast.Name):
            assert node.id in ("P", "_coalesce"), f"{node.id} in {kql!r}: a column the model does not know"
        if isinstance(node, ast.Attribute):
            assert node.attr == "get", kql
    code = compile(tree, "<kql>", "eval")
    return lambda row: eval(code, {"_coalesce": _coalesce, "__builtins__": {}}, {"P": row})


def _split_pipes(query: str) -> list[str]:
    parts: list[str] = []
    current, quoted = "", False
    for char in query:
        if char == '"':
            quoted = not quoted
        if char == "|" and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


@dataclass(frozen=True)
class Query:
    """A translated query: the rows it keeps, each with the columns its ``extend`` steps add."""

    table: str
    steps: tuple[tuple[str, Any], ...]

    @classmethod
    def parse(cls, kql: str, *, rows_only: bool = False) -> Query:
        """``rows_only``: the rows the query keeps before it shapes them (a workbook panel's ``summarize``,
        ``project``...: not read)."""
        table, *rest = _split_pipes(kql)
        steps: list[tuple[str, Any]] = []
        for step in rest:
            verb, _, body = step.partition(" ")
            if rows_only and verb not in ("where", "extend"):
                break
            if verb == "where":
                steps.append(("where", _expression(body)))
            elif verb == "extend":
                for assignment in re.split(r",\s*(?=\w+\s*=[^=])", body):
                    name, _, expr = assignment.partition("=")
                    steps.append(("extend", (name.strip(), _expression(expr))))
            else:
                raise AssertionError(f"the model does not read the step {step!r}")
        return cls(table.strip(), tuple(steps))

    def run(self, table: str, rows: Iterable[Row]) -> list[dict[str, str]]:
        if table != self.table:
            return []
        kept: list[dict[str, str]] = []
        for row in rows:
            columns: dict[str, str] = dict(row)
            keep = True
            for verb, step in self.steps:
                if verb == "where" and not step(columns):
                    keep = False
                    break
                if verb == "extend":
                    name, expr = step
                    columns[name] = str(expr(columns))
            if keep:
                kept.append(columns)
        return kept


@dataclass(frozen=True)
class LogRule:
    name: str
    query: Query
    frequency: int  # minutes
    window: int  # minutes
    threshold: float
    dimensions: tuple[str, ...]
    stateful: bool
    mute: int  # minutes
    periods: tuple[int, int] = (1, 1)  # failingPeriods: (numberOfEvaluationPeriods, minFailingPeriodsToAlert)

    @staticmethod
    def properties(symbol: str) -> dict[str, Any]:
        rules = resources(load(MODULES / "alerts.bicep"), "Microsoft.Insights/scheduledQueryRules")
        [resource] = [r for r in rules if r.symbol == symbol]
        return dict(resource.body["properties"])

    @classmethod
    def criteria(cls, symbol: str) -> list[dict[str, Any]]:
        return list(cls.properties(symbol)["criteria"]["allOf"])

    @classmethod
    def of(cls, symbol: str) -> LogRule:
        props = cls.properties(symbol)
        [criterion] = props["criteria"]["allOf"]
        assert (criterion["timeAggregation"], criterion["operator"]) == ("Count", "GreaterThan"), symbol
        failing = criterion.get("failingPeriods", {})
        periods = (int(failing.get("numberOfEvaluationPeriods", 1)), int(failing.get("minFailingPeriodsToAlert", 1)))
        assert 1 <= periods[1] <= periods[0], (symbol, periods)
        dimensions = []
        for dimension in criterion.get("dimensions", []):
            assert (dimension["operator"], dimension["values"]) == ("Include", ["*"]), dimension
            dimensions.append(str(dimension["name"]))
        return cls(
            symbol,
            Query.parse(str(criterion["query"])),
            _minutes(str(props["evaluationFrequency"])),
            _minutes(str(props["windowSize"])),
            float(criterion["threshold"]),
            tuple(dimensions),
            props.get("autoMitigate", True) is not False,
            _minutes(str(props["muteActionsDuration"])) if "muteActionsDuration" in props else 0,
            periods,
        )

    def resolve_after(self) -> int:
        """Evaluations without the condition after which a stateful alert is resolved (see the module)."""
        if self.frequency < 5:
            return -(-10 // self.frequency)
        if self.frequency < 15:
            return 3
        return 2 if self.frequency < 660 else 1

    def pages(
        self, events: Iterable[tuple[float, str, dict[str, str]]], until: float
    ) -> list[tuple[int, tuple[str, ...]]]:
        """The alerts fired (evaluation minute, dimension values) by ``events``: (minute logged, table, Properties)
        of each, evaluations every ``frequency`` minutes from 0 to ``until``."""
        timed = [(minute, self.query.run(table, [row])) for minute, table, row in events]
        fired: dict[tuple[str, ...], int] = {}  # stateful: the alerts fired, with their quiet evaluations since
        muted_until: dict[tuple[str, ...], float] = {}
        pages: list[tuple[int, tuple[str, ...]]] = []
        at = self.frequency
        while at <= until:
            breaches: dict[tuple[str, ...], int] = {}  # per alert, the periods of the lookback whose condition is met
            for period in range(self.periods[0]):
                end = at - period * self.window
                counts: dict[tuple[str, ...], int] = {}
                for minute, kept in timed:
                    if end - self.window < minute <= end:
                        for columns in kept:
                            key = tuple(columns.get(d, "") for d in self.dimensions)
                            counts[key] = counts.get(key, 0) + 1
                for key, count in counts.items():
                    if count > self.threshold:
                        breaches[key] = breaches.get(key, 0) + 1
            met = {key for key, count in breaches.items() if count >= self.periods[1]}
            if self.stateful:
                for key in list(fired):
                    fired[key] = 0 if key in met else fired[key] + 1
                    if fired[key] >= self.resolve_after():
                        del fired[key]
                for key in sorted(met - set(fired)):
                    fired[key] = 0
                    pages.append((at, key))
            else:
                for key in sorted(met):
                    if muted_until.get(key, -1.0) <= at:
                        pages.append((at, key))
                        muted_until[key] = at + self.mute
            at += self.frequency
        return pages
