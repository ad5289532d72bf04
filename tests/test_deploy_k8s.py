"""Kubernetes manifests (deploy/k8s): rendered, validated, coherent, and run for real.

- every kustomization renders with `kubectl kustomize` (its built-in kustomize; no cluster) and
  every object validates strictly against the Kubernetes API schemas kubernetes-validate ships,
  for Kubernetes K8S_VERSION;
- the pieces fit: the master waits for as many workers as the Deployment runs, workers reach the
  master through its Service, Services select the pods and name their ports, every ConfigMap,
  Secret and claim a pod uses exists (or is documented as created by hand), the scenario in the
  ConfigMap loads with the environment the pods get, the HPA's metrics are the adapter's;
- the small overlay's simulator, master Job and worker pods run as local processes on loopback
  (tests/deploy_local.py: only addresses and mount paths change) and complete a distributed
  rehearsal with records from every worker; a real Prometheus scrapes the master through the
  metrics Service's annotations, and the example prometheus-adapter rules, evaluated against it,
  yield the per-pod metrics the example HPA scales on.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helpers import fake_nvml
from helpers.binaries import require_binary
from helpers.deploy_local import (
    Network,
    Processes,
    dockerfile_entrypoint,
    k8s_expand,
    only,
)
from helpers.paths import ROOT
from helpers.ports import free_port
from helpers.processes import CAPACITY
from helpers.results import only_folder, records_by_worker
from helpers.waiting import wait_until
from helpers.web import http_ok

from capacity_plugins.corpus import load_corpus
from capacity_plugins.scenario import load_scenario

K8S = ROOT / "deploy/k8s"
K8S_VERSION = "1.32.0"          # the kubectl on this machine; kubernetes-validate ships 1.x schemas
KUSTOMIZATIONS = ("overlays/small", "overlays/large", "fetch", "examples/inference-hpa", "../grafana")
WORKERS = {"overlays/small": 3, "overlays/large": 50}
SECRET_VALUE = "sk-k8s-test-key-4711"


def render(path: Path) -> list[dict[str, Any]]:
    kubectl = require_binary("kubectl")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def get(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """An object by kind and name; generated names carry kustomize's hash suffix."""
    return only(d for d in docs if d["kind"] == kind and re.fullmatch(rf"{name}(-[a-z0-9]{{10}})?", d["metadata"]["name"]))


def container(doc: dict[str, Any]) -> dict[str, Any]:
    return only(doc["spec"]["template"]["spec"]["containers"] if "template" in doc["spec"] else doc["spec"]["containers"])


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("where", KUSTOMIZATIONS)
def test_renders_and_validates_strictly(where):
    docs = render(K8S / where)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_large_with_the_corpus_volume_renders_and_validates(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "capacity",
        # as an overlay that adds the component would; kustomize takes relative paths only
        "resources": [os.path.relpath(K8S / "overlays/large", tmp_path)],
        "components": [os.path.relpath(K8S / "components/corpus-volume", tmp_path)]}))
    docs = render(tmp_path)
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"capacity"}
    for kind, name in (("Job", "capacity-master"), ("Deployment", "capacity-worker")):
        pod = get(docs, kind, name)["spec"]["template"]["spec"]
        claim = only(v for v in pod["volumes"] if v["name"] == "corpus")["persistentVolumeClaim"]["claimName"]
        assert get(docs, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadOnlyMany"]
        assert {"name": "corpus", "mountPath": "/corpus", "readOnly": True} in container(get(docs, kind, name))["volumeMounts"]
    target = get(docs, "ConfigMap", "capacity-target")["data"]
    assert target["CORPUS"].startswith("/corpus/")


def _overlay_on_large(tmp_path: Path, replicas: int, with_transformer: bool) -> list[dict[str, Any]]:
    """An overlay of one's own on overlays/large that sets its own worker count, as docs/deploy.md shows."""
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(K8S / "overlays/large", tmp_path)],
        "replicas": [{"name": "capacity-worker", "count": replicas}]}
    if with_transformer:
        doc["transformers"] = [os.path.relpath(K8S / "worker-count", tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return render(tmp_path)


def test_an_overlay_on_large_with_its_own_replicas_keeps_the_masters_count(tmp_path):
    docs = _overlay_on_large(tmp_path, 10, with_transformer=True)
    master = container(get(docs, "Job", "capacity-master"))
    assert get(docs, "Deployment", "capacity-worker")["spec"]["replicas"] == 10
    assert k8s_expand(flag(master["args"], "--expect-workers"), _env_of(docs, master)) == "10"
    # the negative control: without the one transformer line the master would wait for 50 that never come
    (tmp_path / "kustomization.yaml").unlink()
    docs = _overlay_on_large(tmp_path, 10, with_transformer=False)
    assert _env_of(docs, container(get(docs, "Job", "capacity-master")))["CAPACITY_EXPECT_WORKERS"] == "50"


def test_every_overlay_that_sets_replicas_copies_them_with_the_one_transformer():
    for path in sorted(K8S.glob("**/kustomization.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc.get("replicas"):
            assert any(Path(t).name == "worker-count" for t in doc.get("transformers") or ()), path
            assert "replacements" not in doc, path  # one copy of the count, not one per overlay


def test_the_workers_stop_within_the_documented_bound_and_the_master_tolerates_as_long():
    from capacity_plugins.swarm import deadman, locust_compat

    for where in WORKERS:
        docs = render(K8S / where)
        env = _env_of(docs, container(get(docs, "Deployment", "capacity-worker")))
        silence = float(env["CAPACITY_MASTER_SILENCE_S"])
        assert silence == deadman.DEFAULT_SILENCE_S <= 10
        assert silence <= locust_compat.HEARTBEAT_LIVENESS_S  # the worker stops no later than the master gives up on it
        assert float(env["CAPACITY_MASTER_REJOIN_S"]) == deadman.DEFAULT_REJOIN_S < 60  # before Locust's own 60 s
    deploy = (ROOT / "docs/deploy.md").read_text()
    assert "CAPACITY_MASTER_SILENCE_S" in deploy and "HEARTBEAT_LIVENESS" in deploy


def test_strict_validation_is_not_a_rubber_stamp():
    doc = copy.deepcopy(get(render(K8S / "overlays/small"), "Deployment", "capacity-worker"))
    container(doc)["resource"] = container(doc).pop("resources")           # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _env_of(docs: list[dict[str, Any]], c: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet builds it (envFrom, then env)."""
    env: dict[str, str] = {}
    for ref in c.get("envFrom", []):
        env.update(get(docs, "ConfigMap", ref["configMapRef"]["name"])["data"])
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = k8s_expand(item["value"], env)
        elif "secretKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["secretKeyRef"]
            secret = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]]
            env[item["name"]] = base64.b64decode(secret[0]["data"][ref["key"]]).decode() if secret else SECRET_VALUE
    return env


def _write_config_volume(docs: list[dict[str, Any]], cm_name: str, folder: Path) -> Path:
    cm = get(docs, "ConfigMap", cm_name)
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in (cm.get("data") or {}).items():
        (folder / key).write_text(text)
    for key, b64 in (cm.get("binaryData") or {}).items():
        (folder / key).write_bytes(base64.b64decode(b64))
    return folder


@pytest.mark.parametrize("where", list(WORKERS))
def test_the_swarm_is_wired_together(where, tmp_path, monkeypatch):
    docs = render(K8S / where)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"capacity"}
    job, workers = get(docs, "Job", "capacity-master"), get(docs, "Deployment", "capacity-worker")
    master, worker = container(job), container(workers)
    # the master waits for exactly the workers the Deployment runs
    env = _env_of(docs, master)
    assert workers["spec"]["replicas"] == WORKERS[where]
    assert k8s_expand(flag(master["args"], "--expect-workers"), env) == str(WORKERS[where])
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # workers reach it through its Service, whose port leads to the master's container port
    service = get(docs, "Service", flag(worker["args"], "--master-host"))
    port = only(p for p in service["spec"]["ports"] if p["port"] == int(flag(worker["args"], "--master-port")))
    named = {p["name"]: p["containerPort"] for p in master["ports"]}
    assert named[port["targetPort"]] == int(flag(master["args"], "--master-bind-port"))
    assert flag(master["args"], "--bind") == "0.0.0.0"
    for svc in (d for d in docs if d["kind"] == "Service"):
        selected = [d for d in docs if d["kind"] in ("Job", "Deployment", "DaemonSet")
                    and svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert selected, f"Service {svc['metadata']['name']} selects no pod"
    # the metrics Service's scrape annotations point at the exporter
    metrics = get(docs, "Service", "capacity-metrics")
    ann = metrics["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
    assert ann["prometheus.io/port"] == flag(master["args"], "--exporter-port")
    # images: the analysis runs on the master only
    assert master["image"].endswith("-full") and worker["image"].endswith("-worker")
    assert flag(master["args"], "--output") in {m["mountPath"] for m in master["volumeMounts"]}
    # everything a pod refers to exists, except the API key Secret the docs say to create
    pods = [d for d in docs if d["kind"] in ("Job", "Deployment", "DaemonSet")]
    for pod in pods:
        spec = pod["spec"]["template"]["spec"]
        for v in spec.get("volumes", []):
            if "configMap" in v:
                get(docs, "ConfigMap", v["configMap"]["name"])
            if "persistentVolumeClaim" in v:
                get(docs, "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
        assert spec["securityContext"]["runAsNonRoot"] is True
    secrets = {r["valueFrom"]["secretKeyRef"]["name"] for c in (master, worker) for r in c["env"] if "valueFrom" in r}
    rendered = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert secrets <= rendered or secrets == {"capacity-api-key"}
    # the scenario loads with the environment the pods get, corpus included
    volume = only(v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
    folder = _write_config_volume(docs, volume["configMap"]["name"], tmp_path / "etc")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    scenario = load_scenario(folder / "scenario.yaml")
    assert scenario.target.api_key_env in env and scenario.output == flag(master["args"], "--output")
    corpus = load_corpus(scenario.corpus_path(), min_distinct=scenario.corpus.min_distinct)
    assert corpus.distinct_count() >= 1000


def test_gpu_agent_daemonset_targets_gpu_nodes():
    agent = get(render(K8S / "overlays/large"), "DaemonSet", "capacity-gpu-agent")
    spec = agent["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    c = container(agent)
    assert c["args"][0] == "gpu-agent" and c["image"].endswith("-worker")
    port = only(c["ports"])
    assert port["hostPort"] == port["containerPort"] == int(flag(c["args"], "--port"))
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])           # monitors, allocates no GPU


def test_results_reader_mounts_the_masters_volume():
    reader = get(render(K8S / "fetch"), "Pod", "capacity-results-reader")
    master = get(render(K8S / "overlays/small"), "Job", "capacity-master")
    claim = only(v for v in master["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v)
    mine = only(v for v in reader["spec"]["volumes"] if "persistentVolumeClaim" in v)
    assert mine["persistentVolumeClaim"] == claim["persistentVolumeClaim"]
    output = flag(container(master)["args"], "--output")
    assert {"name": mine["name"], "mountPath": output} in container(reader)["volumeMounts"]
    assert reader["metadata"]["namespace"] == master["metadata"]["namespace"]


def _adapter_rules() -> list[dict[str, Any]]:
    docs = render(K8S / "examples/inference-hpa")
    return yaml.safe_load(get(docs, "ConfigMap", "prometheus-adapter-capacity-rules")["data"]["config.yaml"])["rules"]


def test_hpa_scales_on_the_adapters_metrics():
    docs = render(K8S / "examples/inference-hpa")
    hpa = get(docs, "HorizontalPodAutoscaler", "vllm")
    wanted = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    published = {r["name"]["as"] for r in _adapter_rules()}
    assert wanted == published == {"vllm_num_requests_waiting", "vllm_gpu_utilization_pct"}
    for rule in _adapter_rules():
        metric = re.match(r"^([A-Za-z_:][\w:]*)", rule["seriesQuery"]).group(1)
        assert re.search(rule["name"]["matches"], metric)


# -- slow: the small overlay as local processes ------------------------------------------------------------


def _service_ports(docs: list[dict[str, Any]], net: Network) -> None:
    """Service (name, port) → the selected pod's (component, containerPort) local port."""
    for svc in (d for d in docs if d["kind"] == "Service"):
        pod = only(d for d in docs if d["kind"] in ("Job", "Deployment")
                   and svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items())
        component = pod["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        named = {p["name"]: p["containerPort"] for p in container(pod)["ports"]}
        for p in svc["spec"]["ports"]:
            net.ports[(svc["metadata"]["name"], p["port"])] = net.port(component, named[p["targetPort"]])


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.background  # waits on its processes, asserts no timing (tests/README.md)
@pytest.mark.timeout(600)
def test_small_overlay_runs_a_distributed_rehearsal(tmp_path):
    prometheus = require_binary("prometheus")
    docs = render(K8S / "overlays/small")
    # The scenario's knobs live in the capacity-target ConfigMap: shorter steps and outputs for a
    # test, as an overlay would set them. Nothing else changes.
    target = get(docs, "ConfigMap", "capacity-target")
    target["data"].update({"STEP_S": "4", "WARMUP_S": "1", "MAX_TOKENS": "16", "MIN_REQUESTS": "20"})
    entry = dockerfile_entrypoint()
    net = Network()
    pods = {"simulator": get(docs, "Deployment", "capacity-simulator"), "master": get(docs, "Job", "capacity-master"),
            "worker": get(docs, "Deployment", "capacity-worker")}
    for component, pod in pods.items():
        for p in container(pod).get("ports", []):
            net.ports[(component, p["containerPort"])] = free_port()
    _service_ports(docs, net)
    results = tmp_path / "results"
    results.mkdir()
    procs = Processes(tmp_path / "logs")

    def start(component: str, name: str) -> subprocess.Popen[bytes]:
        pod = pods[component]
        c = container(pod)
        net.mounts.clear()
        volumes = {v["name"]: v for v in pod["spec"]["template"]["spec"].get("volumes", [])}
        for m in c.get("volumeMounts", []):
            v = volumes[m["name"]]
            if "configMap" in v:
                net.mounts[m["mountPath"]] = _write_config_volume(docs, v["configMap"]["name"], tmp_path / name / m["name"])
            elif "persistentVolumeClaim" in v:
                net.mounts[m["mountPath"]] = results
            else:
                (tmp_path / name / m["name"]).mkdir(parents=True, exist_ok=True)
                net.mounts[m["mountPath"]] = tmp_path / name / m["name"]
        env = {k: net.url(v) for k, v in _env_of(docs, c).items()}
        argv = (c.get("command") or entry) + [k8s_expand(a, env) for a in c.get("args", [])]
        return procs.start(name, net.argv(component, argv), env, cwd=tmp_path)

    prom_port = free_port()
    base = f"http://127.0.0.1:{prom_port}"
    try:
        start("simulator", "simulator")
        probe = container(pods["simulator"])["readinessProbe"]["httpGet"]
        named = {p["name"]: p["containerPort"] for p in container(pods["simulator"])["ports"]}
        ready = f"http://127.0.0.1:{net.port('simulator', named[probe['port']])}{probe['path']}"
        wait_until(lambda: http_ok(ready), 60, "the simulator's readiness probe", procs, interval=0.2)
        _start_prometheus(prometheus, docs, net, procs, tmp_path, prom_port)
        t_start = time.time()
        master = start("master", "master")
        for i in range(pods["worker"]["spec"]["replicas"]):
            start("worker", f"worker-{i}")
        master.wait(timeout=400)
        t_end = time.time()
        time.sleep(2.5)
        logs = procs.all_logs()
        assert master.returncode == 0, logs
        folder = only_folder(results)
        assert set(records_by_worker(folder / "requests.jsonl")) == {0, 1, 2}, logs
        assert (folder / "summary.json").exists()
        for f in folder.iterdir():
            assert SECRET_VALUE not in f.read_text(errors="replace") and \
                base64.b64decode(get(docs, "Secret", "capacity-api-key")["data"]["api-key"]).decode() \
                not in f.read_text(errors="replace"), f.name
        for name in procs.procs:
            assert "Traceback" not in procs.log(name), (name, procs.log(name)[-3000:])
        _check_prometheus(base, t_start, t_end)
    finally:
        procs.stop()


def _start_prometheus(binary: str, docs, net: Network, procs: Processes, tmp: Path, port: int) -> None:
    """Scrape the master as the annotations of its metrics Service say; the simulator labelled as a
    vLLM pod (what Kubernetes pod discovery gives); a gpu-agent on the fake NVML labelled as
    dcgm-exporter's pod mapping arrives through its Service (exported_namespace / exported_pod)."""
    ann = get(docs, "Service", "capacity-metrics")["metadata"]["annotations"]
    agent_port = free_port()
    procs.start("gpu-agent", [*CAPACITY, "gpu-agent", "--port", str(agent_port), "--interval", "1"],
                fake_nvml.subprocess_env(), cwd=tmp)
    pod = {"namespace": "inference", "pod": "vllm-0"}
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "capacity", "metrics_path": ann["prometheus.io/path"],
         "static_configs": [{"targets": [f"127.0.0.1:{net.port('capacity-metrics', int(ann['prometheus.io/port']))}"]}]},
        {"job_name": "vllm", "static_configs": [{"targets": [f"127.0.0.1:{net.port('capacity-simulator', 8000)}"],
                                                 "labels": pod}]},
        {"job_name": "dcgm", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"],
                                                 "labels": {f"exported_{k}": v for k, v in pod.items()}}]},
    ]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    procs.start("prometheus", [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"], {}, cwd=tmp)
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/-/ready"), 60, "prometheus", procs, interval=0.2)


def _prom(base: str, path: str, params: dict[str, Any]) -> Any:
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{base}{path}?" + urllib.parse.urlencode(params, doseq=True), timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def _check_prometheus(base: str, start: float, end: float) -> None:
    # the metrics Service's annotations led Prometheus to the swarm's exporter (which stops with
    # Locust, before the master's analysis: ask over the run, not at its end)
    assert _prom(base, "/api/v1/query_range", {"query": "sum(capacity_requests_total)", "start": start, "end": end,
                                               "step": 1})["result"]
    at = (start + end) / 2
    # each adapter rule: its seriesQuery finds the series, its metricsQuery (templated the way
    # prometheus-adapter does for a pod selector) gives one value per pod
    for rule in _adapter_rules():
        series = _prom(base, "/api/v1/series", {"match[]": rule["seriesQuery"], "start": start, "end": end})
        assert series, rule["seriesQuery"]
        ns_label, pod_label = (next(k for k, v in rule["resources"]["overrides"].items() if v["resource"] == r)
                               for r in ("namespace", "pod"))
        metric = series[0]["__name__"]
        query = (rule["metricsQuery"].replace("<<.Series>>", metric)
                 .replace("<<.LabelMatchers>>", f'{ns_label}="inference",{pod_label}=~"vllm-0"')
                 .replace("<<.GroupBy>>", pod_label))
        result = _prom(base, "/api/v1/query", {"query": query, "time": at})["result"]
        assert [r["metric"] for r in result] == [{pod_label: "vllm-0"}], (query, result)
        assert float(result[0]["value"][1]) >= 0
