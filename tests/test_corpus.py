"""Corpus loading, validation errors, sampling/sharding, the built-in corpus and `capacity corpus`."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.paths import ROOT
from helpers.processes import capacity

from capacity_plugins.contracts.percentiles import quantile
from capacity_plugins.corpus import Sample, estimate_tokens, load_corpus
from capacity_plugins.corpus.builtin import BUILTIN_FILE, DATA_DIR, builtin_records, gzip_bytes
from capacity_plugins.corpus.readers import to_jsonl
from capacity_plugins.errors import UserError


def _write_jsonl(path: Path, n: int, extra: dict | None = None) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"question number {i}: why is the sky blue?", **(extra or {})}) + "\n")
    return path


@pytest.fixture(scope="module")
def builtin():
    return load_corpus("builtin")


# -- Sample ------------------------------------------------------------------------------


def test_sample_text_and_messages() -> None:
    p = Sample.make("a", prompt="hello world")
    assert p.as_messages() == [{"role": "user", "content": "hello world"}]
    assert p.text == "hello world" and p.prompt_chars == 11 and p.prompt_tokens_est == 3
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "你好"}]}]
    m = Sample.make("b", messages=msgs, max_tokens=7)
    assert m.prompt is None and m.as_messages() is msgs
    assert m.text == "be brief\n\n你好" and m.max_tokens == 7


def test_estimate_tokens_rule() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("扩容之前先压测") == 7
    assert estimate_tokens("GPU 利用率") == 3 + 1  # 3 CJK + "GPU " (4 other chars → 1)
    assert estimate_tokens("ab，") == 1 + 1  # full-width comma is CJK punctuation


# -- file formats ------------------------------------------------------------------------


def test_jsonl_with_prompt_messages_ids_and_max_tokens(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"prompt": f"p{i} distinct text", "max_tokens": 16}) for i in range(5)]
    lines.insert(2, "")  # blank lines are skipped, line numbers still count them
    lines.append(json.dumps({"id": "conv-1", "messages": [{"role": "user", "content": "hi there"}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    c = load_corpus(path, min_distinct=6)
    assert [s.id for s in c.samples] == ["1", "2", "4", "5", "6", "conv-1"]
    assert c.samples[0].max_tokens == 16 and c.samples[-1].messages is not None
    assert c.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert load_corpus(path, min_distinct=6, max_tokens_field=False).samples[0].max_tokens is None


def test_jsonl_gz(tmp_path: Path) -> None:
    plain = _write_jsonl(tmp_path / "c.jsonl", 20)
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert [s.text for s in load_corpus(gz, min_distinct=20).samples] == [
        s.text for s in load_corpus(plain, min_distinct=20).samples
    ]


def test_csv_with_prompt_column(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text('id,Prompt,max_tokens\nx1,"first, with comma",32\nx2,"multi\nline",\n,third one,8\n',
                    encoding="utf-8")
    c = load_corpus(path, min_distinct=3)
    assert [(s.id, s.prompt, s.max_tokens) for s in c.samples] == [
        ("x1", "first, with comma", 32), ("x2", "multi\nline", None), ("5", "third one", 8)
    ]


def test_sharegpt_json(tmp_path: Path) -> None:
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "What is a GPU?"},
                                      {"from": "gpt", "value": "x" * 400}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},  # skipped
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "第二个问题"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    c = load_corpus(path, min_distinct=2)
    assert [(s.id, s.prompt, s.max_tokens) for s in c.samples] == [("a", "What is a GPU?", 100), ("c", "第二个问题", None)]


def test_parquet(tmp_path: Path) -> None:
    # pyarrow is a dependency, so Parquet corpora always load.
    import pandas as pd

    path = tmp_path / "c.parquet"
    pd.DataFrame({"prompt": ["a b", "c d"], "max_tokens": [5, 6]}).to_parquet(path)
    assert [(s.prompt, s.max_tokens) for s in load_corpus(path, min_distinct=2).samples] == [("a b", 5), ("c d", 6)]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("c.jsonl", '{"prompt": "ok"}\n{"prompt": "fine"}\n{"prompt": oops}\n', r"c\.jsonl:3: invalid JSON"),
        ("c.jsonl", '{"prompt": "ok"}\n' * 16 + '{"text": "x"}\n', r'c\.jsonl:17: missing "prompt" or "messages"'),
        ("c.jsonl", '{"prompt": ""}\n', r'c\.jsonl:1: "prompt" must be a non-empty string'),
        ("c.jsonl", '{"prompt": "a", "messages": []}\n', r'c\.jsonl:1: has both'),
        ("c.jsonl", '{"messages": [{"content": "x"}]}\n', r'c\.jsonl:1: messages\[0\] needs a "role"'),
        ("c.jsonl", '{"prompt": "a", "max_tokens": 0}\n', r'c\.jsonl:1: "max_tokens" must be a positive integer'),
        ("c.jsonl", '{"prompt": "a", "max_tokens": "many"}\n', r'c\.jsonl:1: "max_tokens"'),
        ("c.jsonl", '{"id": 1, "prompt": "a"}\n{"id": "1", "prompt": "b"}\n', r"c\.jsonl:2: duplicate id '1' \(first at 1\)"),
        ("c.jsonl", "[1, 2]\n", r"c\.jsonl:1: expected a JSON object"),
        ("c.jsonl", "", r"c\.jsonl: empty corpus"),
        ("c.jsonl", "\n\n  \n", r"c\.jsonl: empty corpus"),
        ("c.csv", "text,n\nhello,1\n", r'c\.csv:1: no "prompt" column \(columns: text, n\)'),
        ("c.csv", "prompt\nhello\n\"\"\n", r'c\.csv:3: empty "prompt"'),
        ("c.csv", "", r"c\.csv: empty file"),
        ("c.json", '[{"prompt": "a"},\n {"prompt": }]', r"c\.json:2: invalid JSON"),
        ("c.json", '{"prompt": "a"}', r"c\.json: expected a JSON list"),
        ("c.txt", "hello\n", r"c\.txt: unknown corpus format"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message) as exc:
        load_corpus(path, min_distinct=1)
    assert "\n" not in str(exc.value)  # one line, printed as is by the CLI


def test_missing_file_and_bad_utf8(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nope.jsonl: no such corpus file"):
        load_corpus(tmp_path / "nope.jsonl")
    bad = tmp_path / "b.jsonl"
    bad.write_bytes(b'{"prompt": "a"}\n{"prompt": "\xff"}\n')
    with pytest.raises(UserError, match=r"b\.jsonl:2: not valid UTF-8"):
        load_corpus(bad, min_distinct=1)


def test_min_distinct_counts_distinct_prompts_and_says_how_to_lower(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with path.open("w") as f:
        for i in range(50):
            f.write(json.dumps({"prompt": f"prompt {i % 37}"}) + "\n")
    with pytest.raises(UserError, match=r"only 37 distinct prompts \(50 in total\).*--min-distinct"):
        load_corpus(path)  # default 1000
    c = load_corpus(path, min_distinct=37)
    st = c.stats()
    assert (st["count"], st["distinct"], st["duplicates"]) == (50, 37, 13)


def test_stats_report_shared_long_prefixes_and_languages(tmp_path: Path) -> None:
    system = "You are a careful assistant. " * 30  # ≈ 220 estimated tokens, shared by 10 prompts
    path = tmp_path / "c.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(10):
            f.write(json.dumps({"prompt": f"{system}Question {i}?"}) + "\n")
        for i in range(10):
            f.write(json.dumps({"prompt": f"第{i}个问题：为什么压测之前要准备一千条以上不同的输入？"}) + "\n")
    st = load_corpus(path, min_distinct=1).stats()
    assert st["shared_long_prefix"]["groups"] == 1 and st["shared_long_prefix"]["prompts"] == 10
    assert st["languages"] == {"zh": 0.5, "en": 0.5}
    assert st["prompt_tokens_est"]["max"] >= 220


def test_stats_percentiles_are_the_contracts_nearest_rank() -> None:
    c = load_corpus("synthetic:prompt_tokens=uniform(1,400),output_tokens=uniform(1,50),n=997,seed=2", min_distinct=1)
    st = c.stats()
    chars = [s.prompt_chars for s in c.samples]
    for key, q in (("p10", 0.10), ("p50", 0.50), ("p90", 0.90), ("p99", 0.99)):
        assert st["prompt_chars"][key] == quantile(chars, q)
    assert st["max_tokens"]["p50"] == quantile([s.max_tokens for s in c.samples if s.max_tokens], 0.50)


# -- synthetic ---------------------------------------------------------------------------


def test_synthetic_fixed_lengths_are_exact_estimates() -> None:
    c = load_corpus("synthetic:prompt_tokens=256,output_tokens=64,n=1200,seed=3")
    assert len(c.samples) == 1200 == c.distinct_count()
    assert {s.prompt_tokens_est for s in c.samples} == {256}
    assert {s.max_tokens for s in c.samples} == {64}
    assert c.sha256 == load_corpus("synthetic: n=1200, seed=3, output_tokens=64, prompt_tokens=256").sha256
    assert c.sha256 != load_corpus("synthetic:prompt_tokens=256,output_tokens=64,n=1200,seed=4").sha256


def test_synthetic_distributions_and_languages() -> None:
    c = load_corpus("synthetic:prompt_tokens=normal(400,40),output_tokens=uniform(10,20),n=2000,seed=1,lang=zh")
    lens = [s.prompt_tokens_est for s in c.samples]
    mean = sum(lens) / len(lens)
    sd = (sum((x - mean) ** 2 for x in lens) / len(lens)) ** 0.5
    assert 390 < mean < 410 and 34 < sd < 46
    assert {s.max_tokens for s in c.samples} == set(range(10, 21))
    assert c.stats()["languages"]["zh"] == 1.0
    mix = load_corpus("synthetic:prompt_tokens=uniform(50,60),n=1000,lang=mix").stats()
    assert mix["languages"] == {"zh": 0.5, "en": 0.5} and mix["max_tokens"]["samples_with"] == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("synthetic:prompt_tokens=lognormal(3,1)", "prompt_tokens='lognormal"),
        ("synthetic:prompt_tokens=uniform(10)", "not a length"),
        ("synthetic:prompt_tokenz=5", "unknown key 'prompt_tokenz'"),
        ("synthetic:n=many", "n and seed must be integers"),
        ("synthetic:lang=fr", "lang must be"),
        ("synthetic:n=10", r"only 10 distinct prompts"),
    ],
)
def test_synthetic_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_corpus(spec)


# -- sampling ----------------------------------------------------------------------------


def _corpus(n: int):
    return load_corpus(f"synthetic:prompt_tokens=8,n={n},seed=9", min_distinct=1)


@pytest.mark.parametrize("shard_count", [2, 3])
def test_shards_are_disjoint_and_cover_everything_once_before_a_wrap(shard_count: int) -> None:
    c = _corpus(1001)
    samplers = [c.sampler("shuffle", seed=7, shard_index=i, shard_count=shard_count) for i in range(shard_count)]
    taken = []
    for s in samplers:
        ids = [s.next().id for _ in range(s.shard_size)]
        assert len(set(ids)) == len(ids) and s.wraps == 0
        taken.append(set(ids))
    for i in range(shard_count):
        for j in range(i + 1, shard_count):
            assert not taken[i] & taken[j]
    assert set().union(*taken) == {s.id for s in c.samples}
    assert sum(len(t) for t in taken) == 1001


def test_shuffle_wraps_reshuffle_log_and_count(caplog: pytest.LogCaptureFixture) -> None:
    c = _corpus(100)
    s = c.sampler("shuffle", seed=1, shard_index=1, shard_count=2)
    first = [s.next().id for _ in range(50)]
    assert s.wraps == 0  # exhausted, but nothing repeated yet
    with caplog.at_level(logging.WARNING, logger="capacity_plugins.corpus"):
        second = [s.next().id for _ in range(50)]
    assert s.wraps == 1 and s.sent == 100
    assert set(first) == set(second) and first != second  # same shard, new order
    assert any("wrap 1" in r.getMessage() for r in caplog.records)
    s.next()  # the 101st: the shard is exhausted again
    assert s.wraps == 2


def test_seeded_determinism_and_modes() -> None:
    c = _corpus(300)
    a = [c.sampler(seed=5).next().id for _ in range(1)]
    s1, s2, s3 = c.sampler(seed=5), c.sampler(seed=5), c.sampler(seed=6)
    seq1 = [s1.next().id for _ in range(700)]
    assert seq1 == [s2.next().id for _ in range(700)]
    assert seq1 != [s3.next().id for _ in range(700)]
    assert a[0] == seq1[0]
    assert seq1[:300] != [x.id for x in c.samples]  # shuffled
    seq = c.sampler("sequential")
    assert [seq.next().id for _ in range(300)] == [x.id for x in c.samples]
    seq_shard = c.sampler("sequential", shard_index=1, shard_count=3)
    assert [seq_shard.next().id for _ in range(3)] == [c.samples[i].id for i in (1, 4, 7)]
    r = c.sampler("random", seed=2, shard_index=0, shard_count=2)
    drawn = [r.next().id for _ in range(2000)]
    shard = set(c.sampler("shuffle", seed=2, shard_index=0, shard_count=2)._shard)
    assert {c.samples[i].id for i in shard} >= set(drawn)  # with replacement, still inside the shard
    assert len(set(drawn)) < len(drawn) and r.wraps == 0


def test_sampler_rejects_bad_arguments() -> None:
    c = _corpus(3)
    with pytest.raises(UserError, match="sampling mode 'zipf' unknown"):
        c.sampler("zipf")
    with pytest.raises(UserError, match="not valid"):
        c.sampler(shard_index=2, shard_count=2)
    with pytest.raises(UserError, match="fewer than the 4 workers"):
        c.sampler(shard_count=4)


# -- built-in ----------------------------------------------------------------------------


def test_builtin_has_5000_distinct_prompts_in_both_languages(builtin) -> None:
    st = builtin.stats()
    assert st["distinct"] >= 5000 and st["duplicates"] == 0
    assert 0.3 < st["languages"]["zh"] < 0.7
    assert st["shared_long_prefix"]["groups"] == 0
    assert st["prompt_tokens_est"]["min"] < 30 and 1000 < st["prompt_tokens_est"]["max"] < 6000
    assert st["prompt_tokens_est"]["p50"] < 400 < st["prompt_tokens_est"]["p90"]  # realistic skew
    assert st["messages_samples"] > 0
    assert (DATA_DIR / BUILTIN_FILE).stat().st_size < 3_000_000


def test_builtin_rebuild_is_identical_to_the_shipped_file(builtin) -> None:
    data = to_jsonl(builtin_records())
    assert hashlib.sha256(data).hexdigest() == builtin.sha256
    assert gzip.decompress((DATA_DIR / BUILTIN_FILE).read_bytes()) == data
    assert gzip_bytes(data[:1000]) == gzip_bytes(data[:1000])  # no timestamp in the gzip header


def test_builtin_long_context_set() -> None:
    c = load_corpus("builtin:long")  # exempt from min_distinct: a boundary set
    by_size: dict[str, list[int]] = {}
    for s in c.samples:
        by_size.setdefault(s.id.split("-")[0], []).append(s.prompt_tokens_est)
    assert set(by_size) == {"long8k", "long16k", "long32k"}
    for name, target in (("long8k", 8000), ("long16k", 16000), ("long32k", 32000)):
        assert all(0.93 * target <= t <= 1.07 * target for t in by_size[name]), (name, by_size[name])
    assert c.sha256 == load_corpus("builtin:long").sha256
    assert c.stats()["languages"] == {"zh": 0.5, "en": 0.5}


# -- CLI ---------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return capacity("corpus", *args)


def test_cli_stats_exit_codes(tmp_path: Path) -> None:
    good = _write_jsonl(tmp_path / "good.jsonl", 30)
    r = _cli("stats", str(good), "--min-distinct", "30", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["distinct"] == 30 and st["ok"] is True

    r = _cli("stats", str(good))  # default 1000: stats still printed, then exit 2
    assert r.returncode == 2
    assert "prompts      30" in r.stdout and "only 30 distinct prompts" in r.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"oops": 1}\n')
    r = _cli("stats", str(bad), "--min-distinct", "1")
    assert r.returncode == 2 and "bad.jsonl:2: missing" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    r = _cli("stats")  # argparse usage error
    assert r.returncode == 2


def test_cli_usage_errors_are_one_line() -> None:
    for args in (["stats"], ["stats", "builtin", "--min-distinct", "many"], ["shuffle"]):
        r = _cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, args
        assert r.stderr.startswith("capacity corpus: error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_build_writes_the_same_corpus(tmp_path: Path, builtin) -> None:
    r = _cli("build", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert builtin.sha256 in r.stdout
    # Compare content, not gzip bytes: another zlib version may compress the same data differently.
    rebuilt = gzip.decompress((tmp_path / BUILTIN_FILE).read_bytes())
    assert rebuilt == gzip.decompress((DATA_DIR / BUILTIN_FILE).read_bytes())


# -- package layout ----------------------------------------------------------------------

CORPUS_PKG = ROOT / "capacity_plugins" / "corpus"


def _corpus_imports(path: Path) -> set[str]:
    """Corpus modules `path` imports, at module level or inside a function ("__init__" = the package)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == "capacity_plugins.corpus":
                out.add("__init__")
            elif name.startswith("capacity_plugins.corpus."):
                out.add(name.split(".")[2])
    return out


def test_corpus_modules_depend_one_way() -> None:
    graph = {p.stem: _corpus_imports(p) for p in CORPUS_PKG.glob("*.py")}
    assert {"readers", "synthetic", "sampler", "builtin", "stats", "cli", "loader"} <= set(graph)
    for name, deps in graph.items():
        if name != "__init__":  # the package imports its modules, so a module importing it closes a circle
            assert "__init__" not in deps, f"corpus/{name}.py imports the package; import the module instead"
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        assert name not in path, "import circle: " + " -> ".join([*path, name])
        if name in done:
            return
        for dep in graph[name]:
            visit(dep, [*path, name])
        done.add(name)

    for name in graph:
        visit(name, [])
