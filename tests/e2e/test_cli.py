"""``python -m localrun simulate`` as users and scripts call it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localrun.__main__ import main

pytestmark = pytest.mark.e2e

HOSTILE = [
    {"body": "<script>alert(1)</script>", "message_id": "raw-html"},
    {"body": '{"type": "OrderSubmitted", "schemaVersion": 1, "orderId": "../../etc/passwd"}', "message_id": "raw-path"},
    {
        "body": '{"type": "OrderSubmitted", "schemaVersion": 1, "orderId": "ok-1", "customerId": "c", '
        '"lines": [{"sku": "A", "quantity": 1e9, "unitPriceCents": 1}], "currency": "EUR", "shipTo": "x"}'
    },
    {"body": "{" * 5000, "message_id": "raw-deep"},
]


def simulate(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    code = main(["simulate", "--orders", "10", "--seed", "3", "--report", str(report), "--no-progress", *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


def test_injected_raw_messages_are_each_dead_lettered_with_a_reason(tmp_path, capsys):
    raw = tmp_path / "raw.jsonl"
    raw.write_text("\n".join(json.dumps(line) for line in HOSTILE) + "\n")
    chart = tmp_path / "chart.png"
    code, report = simulate(tmp_path, "--inject-raw", str(raw), "--chart", str(chart))
    assert code == 0
    dead = {d["message_id"]: d for d in report["dead_letters"] if d["queue"] == "orders"}
    assert {"raw-html", "raw-path", "raw-3", "raw-deep"} <= set(dead)
    assert dead["raw-html"]["reason"] == "NotJson"
    assert dead["raw-path"]["reason"] == "InvalidFields" and "orderId" in dead["raw-path"]["description"]
    assert dead["raw-3"]["reason"] == "InvalidFields" and "quantity" in dead["raw-3"]["description"]
    assert report["final_states"]["Processed"] == 10  # the real orders went through beside them
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "invariants (0 = holds)" in out and "VIOLATED" not in out
    # every report carries the modelled cost per million orders, its parts and the summary line
    cost = report["cost_per_1m_orders_usd"]
    # total: GB-s per invocation (the upper bound); total_low: GB-s per activity period (the lower bound)
    assert cost["total"] == pytest.approx(
        sum(v for k, v in cost["parts"].items() if k not in ("durable_dts_actions", "function_gb_s_shared")), abs=0.05
    )
    assert cost["total_low"] == pytest.approx(
        sum(v for k, v in cost["parts"].items() if k not in ("durable_dts_actions", "function_gb_s")), abs=0.05
    )
    assert 0 < cost["parts"]["function_gb_s_shared"] <= cost["parts"]["function_gb_s"]
    assert cost["parts"]["cosmos_ru"] > 0 and cost["parts"]["function_gb_s"] > 0
    assert cost["units_per_order"]["function_executions"] == pytest.approx(
        report["ops_per_order"]["function_executions"], abs=0.01
    )
    assert f"total (Durable on Azure Storage)   {cost['total']}" in out
    assert f"lower bound (Azure Storage)        {cost['total_low']}" in out


def test_an_unknown_profile_key_is_refused_by_name(tmp_path, capsys):
    profile = tmp_path / "typo.json"
    profile.write_text(json.dumps({"agents": {"payment": {"crash_rat": 0.5}}}))
    code, _ = simulate(tmp_path, "--faults", str(profile))
    assert code == 2
    assert "agents.payment.crash_rat" in capsys.readouterr().err


def test_a_malformed_inject_raw_line_is_refused_with_its_line_number(tmp_path, capsys):
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"body": "x"}\n{"text": "no body"}\n')
    code, _ = simulate(tmp_path, "--inject-raw", str(raw))
    assert code == 2
    assert ":2:" in capsys.readouterr().err


def test_the_exit_code_is_1_when_an_invariant_is_violated(tmp_path, monkeypatch, capsys):
    from localrun import report as report_module

    real = report_module.build_report

    def broken(result: Any) -> dict[str, Any]:
        built = real(result)
        built["invariants"]["lost"] = 1  # as if an order had vanished
        return built

    monkeypatch.setattr(report_module, "build_report", broken)
    code, report = simulate(tmp_path)
    assert code == 1
    assert report["invariants"]["lost"] == 1
    assert "INVARIANTS VIOLATED" in capsys.readouterr().err
