"""`capacity run` end to end against the embedded simulator (real Locust subprocesses).

Tiny steps (a few seconds) keep the file well under two minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import pytest
from helpers.ports import free_port
from helpers.processes import CAPACITY, capacity, popen, read_until
from helpers.results import only_folder, read_meta, read_records, read_steps, results_dir
from helpers.scenarios import write_scenario
from helpers.waiting import wait_until
from helpers.web import http_get

pytestmark = pytest.mark.slow

SIM = {"url": "embedded", "simulator": {"max_num_seqs": 4}}


@pytest.mark.measured
def test_concurrency_sweep_every_step_and_records_tagged(tmp_path):
    sc = write_scenario(
        tmp_path,
        "sweep",
        target=SIM,
        request={"max_tokens": 12, "timeout_s": 10},
        # 3-s steps: one late wake-up of the generator's loop is its p99; what is asserted here is the
        # tagging, not the generator's timing (test_starvation and test_analysis_validity own that)
        load={"kind": "concurrency_sweep", "levels": [1, 2, 4], "step_s": 3, "warmup_s": 1,
              "max_loop_lag_p99_ms": 500},
    )
    r = capacity("run", str(sc))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    assert folder.parent == tmp_path / "results" and folder.name.startswith("sweep-")
    steps = read_steps(folder)
    assert [(s["index"], s["kind"], s["level"]) for s in steps] == [(0, "concurrency", 1), (1, "concurrency", 2), (2, "concurrency", 4)]
    for a, b in zip(steps, steps[1:], strict=False):
        # each step starts after the previous one drained: on an idle server
        assert a["start_unix"] < a["warmup_end_unix"] < a["end_unix"] <= a["drain_end_unix"] <= b["start_unix"]
    recs = read_records(folder)
    assert recs and all(r["step"] in (0, 1, 2) for r in recs)
    for s in steps:
        mine = [r for r in recs if r["step"] == s["index"]]
        measured = [r for r in mine if not r["warmup"]]
        assert measured, s
        # tagged at send time: the measured ones were sent inside the step's window
        assert all(s["warmup_end_unix"] <= r["sent_unix"] < s["end_unix"] for r in measured)
        assert all(s["start_unix"] <= r["sent_unix"] < s["drain_end_unix"] for r in mine)
        assert s["achieved_rps"] > 0 and s["client_limited"] is False, s["client_limited_reason"]
    # more users, more throughput below the simulator's 4-slot batch
    assert steps[2]["achieved_rps"] > steps[0]["achieved_rps"]
    meta = read_meta(folder)
    assert meta["complete"] is True and meta["scenario"] == "sweep"
    for f in ("scenario.yaml", "llm_stats.csv", "locust_stats.csv", "summary.json"):
        assert (folder / f).exists(), f
    assert "[capacity] step 3/3" in r.stdout
    # The run ends with the plain answer, its reasons in words and the report — not a bare verdict.
    import json

    answer = json.loads((folder / "summary.json").read_text())["answer"]
    lines = r.stdout.splitlines()
    at = lines.index(f"[capacity] answer: {answer}")
    assert lines[at - 1].startswith("[capacity] results: ")
    assert all(ln.startswith("[capacity]   ") for ln in lines[at + 1:-1]), lines[at:]
    assert lines[-1] == f"[capacity] report: {folder / 'report.html'}"
    assert " → " in answer  # the decision, in capitals, ends the sentence
    # recorded with nothing set up: the embedded catalog beside the folder (docs/history.md)
    catalog = tmp_path / "results" / "history.sqlite"
    assert f"[capacity] history: recorded as run 1 in {catalog}" in lines
    listed = capacity("history", "list", "--format", "json", "--history", str(catalog))
    [entry] = json.loads(listed.stdout)
    assert entry["results_dir"] == str(folder.resolve()) and entry["scenario"] == "sweep", entry


@pytest.mark.alone  # two generators that keep their schedule: not beside another sweep (tests/README.md)
def test_rate_sweep_processes_2_offered_vs_achieved(tmp_path):
    sc = write_scenario(
        tmp_path,
        "rate",
        target={"url": "embedded", "simulator": {"max_num_seqs": 16}},
        corpus={"min_distinct": 100},
        request={"max_tokens": 6, "timeout_s": 10},
        load={"kind": "rate_sweep", "levels": [8, 16], "step_s": 9, "warmup_s": 1, "arrival": "poisson",
              "max_concurrency": 32, "seed": 3},
    )
    r = capacity("run", str(sc), "--processes", "2", "--no-analyze")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    steps = read_steps(folder)
    assert [s["level"] for s in steps] == [8, 16]
    for s in steps:
        print({k: s[k] for k in ("level", "offered_rps", "sent_rps", "achieved_rps", "schedule_lag_p99_ms", "client_cpu_max_pct", "client_limited_reason")})
    for s in steps:
        # offered = arrivals actually scheduled, so Poisson noise cancels out of this comparison
        assert s["offered_rps"] == pytest.approx(s["target_rps"], rel=0.45)
        assert s["achieved_rps"] == pytest.approx(s["offered_rps"], rel=0.05), s
        assert s["sent_rps"] == pytest.approx(s["offered_rps"], rel=0.05), s
        assert s["schedule_lag_p99_ms"] is not None and not s["client_limited"], s
    recs = read_records(folder)
    by_worker = Counter(r["worker"] for r in recs)
    assert set(by_worker) == {0, 1}
    # one global schedule split across the two processes: neither sends the whole rate
    assert max(by_worker.values()) < 0.7 * len(recs)
    prompts = [{r["prompt_id"] for r in recs if r["worker"] == w} for w in (0, 1)]
    assert not prompts[0] & prompts[1]  # disjoint corpus shards
    assert all(r["scheduled_unix"] is not None and r["ttft_from_schedule_ms"] is not None for r in recs if r["ok"])
    assert read_meta(folder)["records"]["lost"] == 0


def test_sigint_mid_run_leaves_an_analysable_folder(tmp_path):
    sc = write_scenario(
        tmp_path,
        "stopme",
        target=SIM,
        request={"max_tokens": 200, "timeout_s": 30},
        load={"kind": "concurrency_sweep", "levels": [2, 4], "step_s": 60, "warmup_s": 1},
    )
    p = popen([*CAPACITY, "run", str(sc)], stderr=subprocess.PIPE)
    try:
        read_until(p, "[capacity] step 1/2 (2 users, run)", 60)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-3000:]
    folder = only_folder(tmp_path / "results")
    meta = read_meta(folder)
    assert meta["complete"] is False and "interrupted" in meta["incomplete_reason"]
    steps = read_steps(folder)
    assert len(steps) == 1 and steps[0]["interrupted"] is True
    assert steps[0]["end_unix"] < steps[0]["start_unix"] + 60  # window clipped to the stop
    kinds = Counter(r["error_kind"] for r in read_records(folder))
    assert kinds[None] >= 1 and kinds["cancelled"] >= 1  # in flight at the stop: recorded, not lost
    assert "Traceback" not in err
    r = capacity("analyze", str(folder))
    # analysed (everything written), but no decision rests on an interrupted run: exit 1
    assert r.returncode == 1, r.stderr[-2000:]
    assert "incomplete" in r.stderr and "Traceback" not in r.stderr
    import json

    summary = json.loads((folder / "summary.json").read_text())
    assert summary["meta"]["incomplete"] is True  # the analysis says the run was cut short
    assert any("incomplete" in w for w in summary["warnings"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("target: {url: embedded}\nload: {levels: [1, two]}\n", "load.levels[1]"),
        ("target: {url: embedded}\nlaod: {levels: [1]}\n", "laod: unknown key"),
        ("target: {url: embedded}\ncorpus: {path: nope.jsonl}\n", "corpus.path: file not found"),
        ("target: {url: 'htp:/x'}\n", "target.url"),
        ("target: {url: embedded\n", "YAML syntax error"),
    ],
)
def test_bad_scenario_one_line_exit_2(tmp_path, text, expected):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    r = capacity("run", str(p), timeout=60)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0] and "bad.yaml" in lines[0], r.stderr
    assert not (tmp_path / "results").exists()


def test_preflight_unreachable_target_exit_1(tmp_path):
    sc = write_scenario(tmp_path, "down", target={"url": f"http://127.0.0.1:{free_port()}", "model": "m"})
    r = capacity("run", str(sc), timeout=60)
    assert r.returncode == 1
    assert "preflight" in r.stderr and "does not answer" in r.stderr and "Traceback" not in r.stderr


def test_preflight_unknown_model_exit_1(tmp_path, start_simulator):
    sim = start_simulator()
    sc = write_scenario(tmp_path, "nomodel", target={"url": sim.url, "model": "no-such-model"})
    r = capacity("run", str(sc), timeout=60)
    assert r.returncode == 1
    assert "no-such-model" in r.stderr and "sim-model" in r.stderr


def test_web_mode_each_ui_test_gets_its_own_analysed_folder(tmp_path):
    import json
    import threading
    import urllib.parse
    import urllib.request

    port = free_port()
    sc = write_scenario(
        tmp_path,
        "web",
        target=SIM,
        request={"max_tokens": 8, "timeout_s": 10},
        load={"kind": "concurrency_sweep", "levels": [1, 2], "step_s": 3, "warmup_s": 1},
    )
    p = popen([*CAPACITY, "run", str(sc), "--web", "--web-port", str(port)])
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()

    def wait_for(prefix: str, timeout: float = 60, nth: int = 1) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [ln.strip() for ln in list(lines) if ln.startswith(prefix)]
            if len(found) >= nth:
                return found[nth - 1]
            time.sleep(0.2)
        raise AssertionError(f"no {prefix!r} (#{nth}) in:\n{''.join(lines)[-3000:]}")

    def swarm() -> None:
        def start() -> bool:  # the UI needs a moment after the results line (a loaded host: seconds)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/swarm", data=body, timeout=5) as r:
                return bool(json.loads(r.read())["success"])

        wait_until(start, 120, "the web UI to start a test")

    try:
        sim_url = wait_for("[capacity] embedded simulator at ").rsplit(" ", 1)[1]
        wait_for("[capacity] results → ")
        # the UI's address is printed, and its start form hides the user count: the scenario drives the load
        assert f"http://127.0.0.1:{port}" in wait_for("[capacity] web UI at ")
        def ui_page() -> str | None:
            status, content, _ = http_get(f"http://127.0.0.1:{port}/")
            return content.decode() if status == 200 else None

        page = wait_until(ui_page, 120, "the web UI's page")
        assert '"hide_common_options": true' in page, page[:2000]
        body = urllib.parse.urlencode({"user_count": 1, "spawn_rate": 1, "host": sim_url}).encode()
        swarm()
        # "analysed: PATH", or on a busy host "analysed, no decision: PATH (why)": a folder either way
        analysed = wait_for("[capacity] analysed", timeout=90)
        # when the test's analysis ends, the terminal says the plain answer, as a headless run ends,
        # and the LLM tab and /llm/answer serve the same sentence with the report's link
        said = wait_for("[capacity] answer: ", timeout=30).removeprefix("[capacity] answer: ")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/llm/answer", timeout=5) as r:
            doc = json.loads(r.read())
        assert doc["answer"] == said and doc["report"] == "./llm/report.html" and doc["pending"] is False
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=5) as r:
            tab = next(e for e in json.loads(r.read())["extended_stats"] if e["key"] == "llm")["data"]
        assert tab[0]["name"].startswith(f"ANSWER: {said}")
        swarm()  # a second test from the UI: its own folder, its own analysis
        analysed2 = wait_for("[capacity] analysed", timeout=90, nth=2)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, "".join(lines)[-3000:]
    folders = sorted(p for p in (tmp_path / "results").iterdir() if p.is_dir())
    assert len(folders) == 2, folders
    reports = {line.split(": ", 1)[1].split(" (", 1)[0] for line in (analysed, analysed2)}
    assert reports == {str(f / "report.html") for f in folders}
    assert said == json.loads((folders[0] / "summary.json").read_text())["answer"]
    ids: list[set[str]] = []
    for folder in folders:
        steps = read_steps(folder)
        assert [s["level"] for s in steps] == [1, 2] and all(not s["interrupted"] for s in steps)
        records = [json.loads(ln) for ln in (folder / "requests.jsonl").read_text().splitlines()]
        assert records and all(r["step"] in (0, 1) for r in records)
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["records"]["written"] == len(records)
        assert (folder / "llm_stats.csv").exists()
        ids.append({r["request_id"] for r in records})
    assert not (ids[0] & ids[1])  # no record of the first test leaked into the second folder


def test_gates_exit_3_with_the_same_rule_as_analyze(tmp_path):
    # An SLO no step can meet and a peak the fleet cannot carry: --fail-on-slo fails the run (3),
    # with the rule `capacity analyze --fail-on-slo` uses; without the flag the same run exits 0.
    sc = write_scenario(
        tmp_path,
        "gate",
        target=SIM,
        request={"max_tokens": 8, "timeout_s": 10},
        load={"kind": "concurrency_sweep", "levels": [1], "step_s": 3, "warmup_s": 1},
        slo={"ttft_p95_ms": 0.001},
        capacity={"peak_qps": 1000, "current_nodes": 1},
    )
    r = capacity("run", str(sc), "--fail-on-slo")
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert "SLO gate" in r.stderr
    folder = results_dir(r.stdout)
    again = capacity("analyze", str(folder), "--quiet", "--no-report", "--fail-on-slo")
    assert again.returncode == 3
    assert capacity("analyze", str(folder), "--quiet", "--no-report").returncode == 0


@pytest.mark.parametrize("dialect", ["tgi", "ollama", "ollama-generate"])
def test_every_dialect_runs_a_scenario_against_the_simulator(tmp_path, dialect):
    # preflight (model listing + one request) and the users both speak the scenario's dialect
    sc = write_scenario(
        tmp_path,
        "dialect",
        target={**SIM, "dialect": dialect},
        request={"max_tokens": 8, "timeout_s": 10},
        load={"kind": "concurrency_sweep", "levels": [2], "step_s": 2, "warmup_s": 0.5},
    )
    r = capacity("run", str(sc), "--no-analyze")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    recs = read_records(results_dir(r.stdout))
    assert recs and all(x["ok"] for x in recs if x["error_kind"] != "cancelled")
    assert all(x["output_tokens"] for x in recs if x["ok"])
