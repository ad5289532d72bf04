"""`capacity analyze` as a user runs it: outputs, gates, and bad input → one line, exit 2."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers.analysis_data import make_results
from helpers.processes import capacity

SEED = dict(levels=[1, 4, 8, 16], rps=[2, 7, 9, 9], e2e_p50_ms=[480, 620, 850, 1200], e2e_p99_ms=[490, 800, 1500, 2600],
            gpu_util=[35, 72, 89, 91], waiting=[0, 1, 3, 8])


def cli(*args: str) -> subprocess.CompletedProcess:
    return capacity(*args)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    p = make_results(tmp_path_factory.mktemp("run"), **SEED)
    r = cli("analyze", str(p), "--peak-qps", "30", "--current-nodes", "2", "--gpu-hour-usd", "2", "--redundancy", "0")
    return p, r


def test_outputs_written_and_html_self_contained(analysed):
    p, r = analysed
    assert r.returncode == 0, r.stderr
    assert "Verdict: SCALE" in r.stdout
    page = (p / "report.html").read_text()
    assert 'data-decision="scale"' in page and "SCALE" in page
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 3  # throughput/latency, distributions, GPU/queue timeline
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in imgs)
    assert not re.search(r'src="(?!data:)', page)  # nothing fetched from elsewhere
    for png in ("throughput_latency.png", "latency_distributions.png", "timeline.png"):
        assert (p / png).read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((p / "summary.json").read_text())
    for key in ("steps", "knee", "capacity", "plan", "cost", "verdict", "checklist", "stability", "meta"):
        assert key in summary
    assert summary["plan"]["nodes"] == 5  # ceil(30 × 1.5 / 9) + 0
    md = (p / "summary.md").read_text()
    assert "| level |" in md and "Knee: 8 users" in md and "needs_human" in md


def test_gates_exit_3(analysed):
    p, _ = analysed
    r = cli("analyze", str(p), "--quiet", "--no-report", "--peak-qps", "30", "--current-nodes", "2",
            "--fail-on-verdict", "scale")
    assert r.returncode == 3 and "verdict gate" in r.stderr
    r = cli("analyze", str(p), "--quiet", "--no-report", "--peak-qps", "30", "--current-nodes", "2", "--fail-on-slo")
    assert r.returncode == 3 and "SLO gate" in r.stderr
    r = cli("analyze", str(p), "--quiet", "--no-report", "--peak-qps", "10", "--current-nodes", "2",
            "--redundancy", "0", "--fail-on-slo", "--fail-on-verdict", "scale", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["decision"] == "dont_scale_yet"


def _one_line_error(r: subprocess.CompletedProcess, *must: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for m in must:
        assert m in lines[0], lines[0]


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    _one_line_error(cli("analyze", str(tmp_path / "nope")), "nope")
    good = make_results(tmp_path / "good", **SEED)

    def variant(name: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        for f in good.iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        return d

    d = variant("no_requests")
    (d / "requests.jsonl").unlink()
    _one_line_error(cli("analyze", str(d)), "requests.jsonl")

    d = variant("corrupt_line")
    lines = (d / "requests.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _one_line_error(cli("analyze", str(d)), "requests.jsonl line 3")

    d = variant("wrong_type")
    lines = (d / "requests.jsonl").read_text().splitlines()
    rec = json.loads(lines[4])
    rec["e2e_ms"] = "slow"
    lines[4] = json.dumps(rec)
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _one_line_error(cli("analyze", str(d)), "requests.jsonl line 5", "e2e_ms")

    d = variant("bad_steps")
    (d / "steps.json").write_text('{"steps": [{"index": 0, "kind": "concurrency"}]}')
    _one_line_error(cli("analyze", str(d)), "steps.json", "level")

    d = variant("bad_slo")
    (d / "scenario.yaml").write_text("name: x\nslo:\n  ttft_p95_ms: -5\n")
    _one_line_error(cli("analyze", str(d)), "scenario.yaml", "slo.ttft_p95_ms")

    d = variant("bad_telemetry")
    (d / "telemetry_series.csv").write_text("when,what\n1,2\n")
    _one_line_error(cli("analyze", str(d)), "telemetry_series.csv")

    _one_line_error(cli("analyze", str(good), "--peak-qps", "lots"), "--peak-qps")
    _one_line_error(cli("analyze", str(good), "--safety-factor", "0.5"), "safety_factor")
