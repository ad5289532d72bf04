"""PromQL query mode against a Prometheus HTTP API stand-in on loopback (the real server test comes
with integration): rows, units, label mapping, NaN dropped, chunking, errors as gaps."""

from helpers.canned_metrics import VLLM_MODEL
from helpers.ports import free_port

from capacity_plugins.telemetry.files import SERIES_COLUMNS, write_series_csv
from capacity_plugins.telemetry.promql import DEFAULT_QUERIES, MAX_POINTS, query_range


def test_rows_units_labels_and_chunks(canned_url, tmp_path):
    gaps: list = []
    rows = query_range(canned_url, {"gpu_util_pct": "DCGM_FI_DEV_GPU_UTIL",
                                    "server_waiting": DEFAULT_QUERIES["server_waiting"]},
                       start=0.0, end=30000.0, step_s=1.0, step_of=lambda t: int(t // 10000), gaps=gaps)
    assert gaps == []
    gpu = [r for r in rows if r["series"] == "gpu_util_pct"]
    assert {(r["host"], r["device"], r["unit"]) for r in gpu} == {("gpu-node-1", "0", "%")}   # gpu 1 was NaN
    # 30 001 points at 1 s need three requests of at most MAX_POINTS points each
    assert sorted(r["unix"] for r in gpu) == [0.0, MAX_POINTS - 1, MAX_POINTS, 2 * MAX_POINTS - 1,
                                              2 * MAX_POINTS, 30000.0]
    assert {r["step"] for r in gpu} == {0, 1, 2, 3}
    waiting = [r for r in rows if r["series"] == "server_waiting"]
    assert waiting[0]["host"] == "10.0.0.5:8000" and waiting[0]["device"] == VLLM_MODEL
    assert waiting[0]["unit"] == "requests"
    assert write_series_csv(rows, tmp_path / "telemetry_series.csv") == len(rows)
    assert (tmp_path / "telemetry_series.csv").read_text().splitlines()[0] == ",".join(SERIES_COLUMNS)


def test_bad_query_and_dead_server_are_gaps(canned_url):
    gaps: list = []
    rows = query_range(canned_url, {"gpu_util_pct": "avg(DCGM_FI_DEV_GPU_UTIL", "sm_active": "DCGM_FI_DEV_GPU_UTIL"},
                       start=0, end=10, step_s=5, gaps=gaps)
    assert len(gaps) == 1 and "bad_data" in gaps[0]["reason"] and "unclosed" in gaps[0]["reason"]
    assert {r["series"] for r in rows} == {"sm_active"}                           # the good query still ran
    dead: list = []
    assert query_range(f"http://127.0.0.1:{free_port()}", {"x": "up"}, 0, 10, 5, timeout_s=2, gaps=dead) == []
    assert len(dead) == 1 and "failed" in dead[0]["reason"]
    not_prom: list = []
    assert query_range(canned_url + "/vllm", {"x": "up"}, 0, 10, 5, gaps=not_prom) == []
    assert "HTTP 404" in not_prom[0]["reason"]
