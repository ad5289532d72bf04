"""`workloads:` in a scenario: the model, the key-by-key merge over the top-level sections, the
copy in a results folder, and one-line errors naming the file and the field path."""

from __future__ import annotations

import pytest
import yaml
from helpers.processes import capacity
from helpers.scenarios import scenario_error, write_yaml

from capacity_plugins.scenario import load_scenario

MIX = """
target: {url: embedded}
corpus: {path: builtin, min_distinct: 500, seed: 7}
request: {max_tokens: 64, temperature: 0.2, timeout_s: 30}
slo: {ttft_p95_ms: 2000, tpot_p95_ms: 80, error_rate: 0.02}
workloads:
  - name: chat
    weight: 6
    slo: {ttft_p95_ms: 1000}
  - name: rag
    weight: 3
    corpus: {path: 'synthetic:prompt_tokens=1500,n=1200', min_distinct: 1000}
    slo: {ttft_p95_ms: 3000}
  - name: batch
    request: {max_tokens: 512, stream: false}
    slo: {ttft_p95_ms: null, tpot_p95_ms: null, e2e_p95_ms: 60000}
"""


write = write_yaml  # short names: every test here writes one
err = scenario_error


def test_without_workloads_there_are_no_classes_and_the_copy_is_unchanged(tmp_path):
    s = load_scenario(write(tmp_path, "target: {url: embedded}\n"))
    assert s.workloads is None and s.workload_classes == ()
    assert "workloads" not in yaml.safe_load(s.resolved_yaml())


def test_a_class_overrides_the_top_level_sections_key_by_key(tmp_path):
    s = load_scenario(write(tmp_path, MIX))
    chat, rag, batch = s.workload_classes
    assert [c.name for c in s.workload_classes] == ["chat", "rag", "batch"]
    assert (chat.weight, rag.weight, batch.weight) == (6, 3, 1)  # weight defaults to 1
    # chat: its own TTFT, everything else from the top level
    assert chat.slo.ttft_p95_ms == 1000 and chat.slo.tpot_p95_ms == 80 and chat.slo.error_rate == 0.02
    assert chat.corpus == s.corpus and chat.request == s.request
    # rag: its own prompts and min_distinct; the top level's sampling seed stays
    assert rag.corpus.path.startswith("synthetic:") and rag.corpus.min_distinct == 1000 and rag.corpus.seed == 7
    assert rag.slo.ttft_p95_ms == 3000 and rag.slo.tpot_p95_ms == 80
    # batch: longer outputs, not streamed, judged on E2E only; temperature still the top level's
    assert batch.request.max_tokens == 512 and not batch.request.stream and batch.request.temperature == 0.2
    assert (batch.slo.ttft_p95_ms, batch.slo.tpot_p95_ms, batch.slo.e2e_p95_ms) == (None, None, 60000)
    # the top-level sections themselves are untouched by the classes
    assert s.slo.ttft_p95_ms == 2000 and s.request.max_tokens == 64


def test_the_results_copy_keeps_what_each_class_set_and_reads_back_the_same(tmp_path):
    s = load_scenario(write(tmp_path, MIX))
    doc = yaml.safe_load(s.resolved_yaml())
    # Only the keys a class wrote: a what-if on the top-level SLO still reaches the others.
    assert doc["workloads"][0] == {"name": "chat", "weight": 6.0, "corpus": {}, "request": {},
                                   "slo": {"ttft_p95_ms": 1000.0}}
    again = load_scenario(write(tmp_path, s.resolved_yaml(), "copy.yaml"))
    assert again.workload_classes == s.workload_classes


def test_a_class_corpus_file_is_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "long.jsonl").write_text('{"prompt": "a long one"}\n')
    s = load_scenario(write(tmp_path, "target: {url: embedded}\nworkloads:\n  - {name: chat}\n"
                                      "  - {name: rag, corpus: {path: data/long.jsonl}}\n"))
    chat, rag = s.workloads or []
    assert s.class_corpus_path(chat) is None  # the top-level corpus
    assert s.class_corpus_path(rag) == str((tmp_path / "data" / "long.jsonl").resolve())


W = "target: {url: embedded}\nworkloads:\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (W + "  - {name: chat, wieght: 2}\n", "s.yaml: workloads[0].wieght: unknown key"),
        (W + "  - {name: chat}\n  - {name: rag, slo: {ttft_p95: 3000}}\n", "s.yaml: workloads[1].slo.ttft_p95: unknown key"),
        (W + "  - {name: chat, corpus: {paht: x}}\n", "s.yaml: workloads[0].corpus.paht: unknown key"),
        (W + "  - {name: chat, weight: 0}\n", "s.yaml: workloads[0].weight: Input should be greater than 0"),
        (W + "  - {name: chat, weight: -2}\n", "s.yaml: workloads[0].weight: Input should be greater than 0"),
        (W + "  - {name: chat}\n  - {name: chat}\n", "s.yaml: workloads[1].name: duplicate class name 'chat'"),
        (W + "  - {weight: 1}\n", "s.yaml: workloads[0].name: Field required"),
        (W + "  - {name: 'a b'}\n", "s.yaml: workloads[0].name: String should match pattern"),
        ("target: {url: embedded}\nworkloads: []\n", "s.yaml: workloads: List should have at least 1 item"),
        (W + "  - {name: chat, request: {max_tokens: -1}}\n", "s.yaml: workloads[0].request.max_tokens: "),
        (W + "  - {name: chat, request: {timeout_s: 5}}\n", "s.yaml: workloads[0].request.timeout_s: applies to the whole run"),
        (W + "  - {name: chat, corpus: {path: missing.jsonl}}\n", "s.yaml: workloads[0].corpus.path: file not found"),
        (W + "  - {name: chat, slo: {ttft_p95_ms: -1}}\n", "s.yaml: workloads[0].slo.ttft_p95_ms: Input should be greater than 0"),
        (W + "  - {name: chat, slo: {itl_p95_ms: 30}}\n", "s.yaml: workloads[0].slo.itl_p95_ms: not judged per workload class"),
        ("target: {url: embedded}\nslo: {itl_p95_ms: 30}\nworkloads: [{name: chat}]\n",
         "s.yaml: slo.itl_p95_ms: not judged per workload class"),
        # the top-level slo has no limit and the class sets none either
        ("target: {url: embedded}\nslo: {ttft_p95_ms: null, tpot_p95_ms: null}\n"
         "workloads: [{name: chat, slo: {ttft_p95_ms: 900}}, {name: batch}]\n",
         "s.yaml: workloads[1].slo: no latency limit for class 'batch'"),
        (W + "  - {name: batch, request: {stream: false}}\n",
         "s.yaml: workloads[0].slo.ttft_p95_ms: class 'batch' does not stream"),
    ],
)
def test_bad_workloads_name_file_and_field(tmp_path, text, expected):
    assert expected in err(tmp_path, text)


def test_a_class_may_null_every_limit_it_inherits_only_by_setting_its_own(tmp_path):
    s = load_scenario(write(tmp_path, "target: {url: embedded}\nslo: {ttft_p95_ms: null, tpot_p95_ms: null}\n"
                                      "workloads: [{name: batch, slo: {e2e_p95_ms: 30000}}]\n"))
    assert s.workload_classes[0].slo.e2e_p95_ms == 30000


def test_cli_bad_workload_one_line_exit_2(tmp_path):
    bad = write(tmp_path, W + "  - {name: chat, weight: 0}\n", "bad.yaml")
    r = capacity("run", str(bad), timeout=60)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad.yaml: workloads[0].weight" in lines[0] and "Traceback" not in r.stderr


def test_a_capacity_search_needs_enough_requests_for_the_strictest_class(tmp_path):
    # each class is judged on its own requests: a class asking 99 % needs 368 of them per step
    text = ("target: {url: embedded}\nload: {kind: capacity_search, min_requests: 100}\n"
            "workloads: [{name: chat}, {name: strict, slo: {attainment: 0.99}}]\n")
    assert "load.min_requests: 100 is too few for a capacity search: showing 99% attainment at 95% confidence " \
           "takes at least 368 requests of every workload class per step" in err(tmp_path, text)
    assert load_scenario(write(tmp_path, text.replace("min_requests: 100", "min_requests: 368"))).load.min_requests == 368
