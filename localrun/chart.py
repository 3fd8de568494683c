"""The PNG chart of a simulation: orders by state over simulated time, with the supervisor's
recoveries and the compensations marked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from domain.states import ProcessState
from localrun.simulation import START, SimulationResult

COLORS = {
    ProcessState.PENDING: "#f2c14e",
    ProcessState.PROCESSING: "#5b8def",
    ProcessState.PROCESSED: "#3aa76d",
    ProcessState.ERROR: "#d64545",
    ProcessState.COMPENSATING: "#a566d6",
    ProcessState.COMPENSATED: "#7d7d7d",
    ProcessState.COMPENSATION_FAILED: "#222222",
}


def chart_format(path: str | Path) -> str:
    """The format a chart at ``path`` is drawn in: the one its suffix names (``.svg``, ``.pdf``), PNG without one."""
    return Path(path).suffix.lstrip(".").lower() or "png"


def write_chart(result: SimulationResult, path: str | Path, file_format: str | None = None) -> None:
    """The chart at exactly ``path`` (matplotlib adds no suffix), in ``file_format`` (default: ``chart_format``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    transitions = sorted(result.audit.transitions, key=lambda t: t.at)
    end = max(result.simulated_s, 1.0)
    steps = 400
    times = [end * i / steps for i in range(steps + 1)]
    counts: dict[ProcessState, list[int]] = {s: [] for s in ProcessState}
    current: dict[str, ProcessState] = {}
    index = 0
    for t in times:
        while index < len(transitions) and (transitions[index].at - START).total_seconds() <= t:
            current[transitions[index].order_id] = transitions[index].after
            index += 1
        tally = Counter(current.values())
        for state in ProcessState:
            counts[state].append(tally.get(state, 0))

    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    shown = [s for s in ProcessState if any(counts[s])]
    ax.stackplot(
        times,
        [counts[s] for s in shown],
        labels=[s.value for s in shown],
        colors=[COLORS[s] for s in shown],
        alpha=0.85,
    )
    retries = [(t.at - START).total_seconds() for t in transitions if t.event == "RetryScheduled"]
    escalations = [(t.at - START).total_seconds() for t in transitions if t.event == "Escalated"]
    compensations = [
        (t.at - START).total_seconds()
        for t in transitions
        if t.after is ProcessState.COMPENSATING and t.before is not ProcessState.COMPENSATING
    ]
    top = max((sum(counts[s][i] for s in shown) for i in range(len(times))), default=1)
    for xs, marker, color, label in (
        (retries, "v", "#000000", "supervisor retry"),
        (escalations, "x", "#d64545", "escalation"),
        (compensations, "D", "#a566d6", "compensation started"),
    ):
        if xs:
            ax.scatter(xs, [top * 1.04] * len(xs), marker=marker, color=color, s=22, label=label, zorder=3)
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("orders")
    inv = result_invariants_text(result)
    ax.set_title(f"{len(result.workload.orders)} orders, seed {result.config.seed}: orders by state  ({inv})")
    ax.set_xlim(0, end)
    ax.set_ylim(0, top * 1.1)
    ax.legend(loc="center right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:  # a file object: matplotlib adds no suffix of its own
        fig.savefig(file, format=file_format or chart_format(path))
    plt.close(fig)


def result_invariants_text(result: SimulationResult) -> str:
    stale = len(result.audit.stale_writes)
    return "no stale writes" if stale == 0 else f"{stale} stale writes"
