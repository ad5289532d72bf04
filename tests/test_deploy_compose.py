"""The Compose demo and the Grafana dashboard, against real processes and a real Prometheus.

- deploy/compose/compose.yaml validates against the Compose Specification schema vendored in
  tests/data_deploy/ (source and version in its README.md);
- its services run as local processes (tests/deploy_local.py: only addresses and mount paths
  change): the simulator (its healthcheck command decides when it is up), the master, WORKERS
  workers, the `gpu` profile's gpu-agent on the fake NVML, and a real Prometheus with
  deploy/compose/prometheus.yml. The rehearsal completes with records from every worker;
- every Grafana panel query, with $__rate_interval / $__interval substituted as Grafana does for
  the provisioned datasource, returns data from that Prometheus over the run;
- the dashboard JSON round-trips unchanged through Grafana's own dashboard model
  (grafana-foundation-sdk), so no key is misspelt or misplaced.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import fake_nvml
from helpers.binaries import require_binary
from helpers.deploy_local import (
    Network,
    Processes,
    compose_interpolate,
    dockerfile_entrypoint,
    only,
    prometheus_query_range,
)
from helpers.json_diff import not_kept
from helpers.paths import ROOT
from helpers.ports import free_port
from helpers.results import only_folder, records_by_worker
from helpers.waiting import wait_until
from helpers.web import http_ok

COMPOSE = ROOT / "deploy/compose"
DASHBOARD = ROOT / "deploy/grafana/capacity-dashboard.json"
DATASOURCE = ROOT / "deploy/grafana/provisioning/datasources/capacity.yaml"
WORKERS = 2
# What a user would export for a short demo; everything else comes from the files.
SHELL_ENV = {"WORKERS": str(WORKERS), "STEP_S": "4", "WARMUP_S": "1", "MIN_REQUESTS": "20"}


def _compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    raw = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
    return raw if env is None else compose_interpolate(raw, env)


def test_compose_file_follows_the_compose_specification():
    schema = json.loads((ROOT / "tests/data_deploy/compose-spec.json").read_text())
    raw = _compose()
    jsonschema.Draft7Validator(schema).validate(raw)
    # and the swarm is wired the same way on both sides
    spec = _compose(SHELL_ENV)["services"]
    master = spec["master"]["command"]
    assert master[master.index("--expect-workers") + 1] == str(spec["worker"]["deploy"]["replicas"]) == "2"
    assert spec["worker"]["command"][spec["worker"]["command"].index("--master-host") + 1] == "master"
    assert all(spec[s]["build"]["target"] == "worker" for s in ("simulator", "worker", "gpu-agent"))
    assert spec["master"]["build"]["target"] == "full"


def _panel_targets() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((f"{panel['title']} / {target.get('legendFormat', target['refId'])}", target["expr"]))
    return out


def _grafana_intervals() -> dict[str, str]:
    """$__interval and $__rate_interval as Grafana computes them for a short range: $__interval is
    the datasource's minimum interval (timeInterval), $__rate_interval = max($__interval + scrape,
    4 × scrape) with scrape = timeInterval."""
    ds = only(yaml.safe_load(DATASOURCE.read_text())["datasources"])
    scrape = int(ds["jsonData"]["timeInterval"].rstrip("s"))
    return {"$__rate_interval": f"{max(2 * scrape, 4 * scrape)}s", "$__interval": f"{scrape}s"}


def _substitute(expr: str, values: dict[str, str]) -> str:
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted Grafana variable in {expr}"
    return expr


@pytest.fixture(scope="module")
def compose_run(tmp_path_factory):
    """The demo's services as local processes, run to completion, with Prometheus still up."""
    prometheus = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("compose")
    spec = _compose(SHELL_ENV)["services"]
    net = Network()
    for service, port in (("simulator", 8000), ("master", 5557), ("master", 9646), ("gpu-agent", 9400)):
        net.ports[(service, port)] = free_port()
    results = tmp / "results"
    results.mkdir()
    entry = dockerfile_entrypoint()

    def mounts(service: str) -> None:
        net.mounts.clear()
        for volume in spec[service].get("volumes", []):
            source, inside = volume.split(":")[:2]
            net.mounts[inside] = (COMPOSE / source).resolve() if source.startswith(".") else results

    def run(service: str, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        mounts(service)
        argv = net.argv(service, entry + spec[service]["command"])
        env = {k: net.url(str(v)) for k, v in (spec[service].get("environment") or {}).items()}
        return procs.start(name, argv, {**env, **(extra_env or {})}, cwd=tmp)

    procs = Processes(tmp / "logs")
    prom_port = free_port()
    base = f"http://127.0.0.1:{prom_port}"
    try:
        run("simulator", "simulator")
        health = spec["simulator"]["healthcheck"]["test"]
        assert health[0] == "CMD"
        probe = [sys.executable if health[1] == "python" else health[1], *[net.url(a) for a in health[2:]]]
        probe[-1] = re.sub(r"127\.0\.0\.1:8000", f"127.0.0.1:{net.port('simulator', 8000)}", probe[-1])
        wait_until(lambda: subprocess.run(probe, capture_output=True, timeout=5).returncode == 0, 60,
                   "the simulator's healthcheck", procs, interval=0.2)
        run("gpu-agent", "gpu-agent", fake_nvml.subprocess_env("two_gpus"))

        config = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
        for job in config["scrape_configs"]:
            for static in job["static_configs"]:
                static["targets"] = [net.url(t) for t in static["targets"]]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        procs.start("prometheus", [prometheus, f"--config.file={tmp / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                    {}, cwd=tmp)

        t_start = time.time()
        master = run("master", "master")
        for i in range(int(spec["worker"]["deploy"]["replicas"])):
            run("worker", f"worker-{i}")
        master.wait(timeout=400)
        t_end = time.time()
        # let Prometheus take the last scrape of the run before anyone queries it
        time.sleep(2.5)
        yield {"procs": procs, "results": results, "master_rc": master.returncode, "prometheus": base,
               "window": (t_start, t_end)}
    finally:
        procs.stop()


@pytest.mark.background  # waits on its processes, asserts no timing (tests/README.md)
@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.timeout(600)  # the module fixture runs the whole demo sweep
def test_compose_services_run_a_distributed_rehearsal(compose_run):
    procs = compose_run["procs"]
    assert compose_run["master_rc"] == 0, procs.all_logs()
    folder = only_folder(compose_run["results"])
    assert set(records_by_worker(folder / "requests.jsonl")) == set(range(WORKERS)), procs.all_logs()
    steps = json.loads((folder / "steps.json").read_text())["steps"]
    assert [s["level"] for s in steps] == [2, 4, 8, 16, 32, 64]
    assert (folder / "summary.json").exists() and (folder / "report.html").exists()
    for name in procs.procs:
        assert "Traceback" not in procs.log(name), (name, procs.log(name)[-3000:])


@pytest.mark.background  # waits on its processes, asserts no timing (tests/README.md)
@pytest.mark.slow
@pytest.mark.prometheus
def test_every_dashboard_query_returns_data(compose_run):
    base, (start, end) = compose_run["prometheus"], compose_run["window"]
    assert http_ok(f"{base}/-/ready")
    values = _grafana_intervals()
    scrape = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())["global"]["scrape_interval"]
    ds = only(yaml.safe_load(DATASOURCE.read_text())["datasources"])
    assert ds["jsonData"]["timeInterval"] == scrape          # the dashboard's rate windows assume it
    empty = []
    for title, expr in _panel_targets():
        series = prometheus_query_range(base, _substitute(expr, values), start, end, 2.0)
        finite = [float(v) for s in series for _, v in s["values"] if math.isfinite(float(v))]
        if not finite:
            empty.append(f"{title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty) + "\n" + compose_run["procs"].all_logs()


def test_dashboard_round_trips_through_grafanas_model():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard
    from grafana_foundation_sdk.models.prometheus import Dataquery

    register_default_plugins()
    original = json.loads(DASHBOARD.read_text())
    model = Dashboard.from_json(original)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    lost = not_kept(original, again)
    assert not lost, f"keys Grafana's dashboard model does not know or changes: {lost[:20]}"
    panels = model.panels or []
    queries = [t for p in panels for t in (getattr(p, "targets", None) or [])]
    assert queries and all(isinstance(q, Dataquery) and q.expr for q in queries)
    ids = [p.id_val for p in panels]
    assert len(ids) == len(set(ids))
    # every panel queries through the dashboard's datasource variable
    assert {json.dumps(p.get("datasource")) for p in original["panels"] if p["type"] != "row"} == \
        {json.dumps({"type": "prometheus", "uid": "${datasource}"})}
