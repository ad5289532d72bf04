"""The thin locustfile under a real `locust` process (headless, loopback fake server)."""

import pytest
from helpers.fake_llm import FAKE_TOKENS
from helpers.processes import run_locust
from helpers.results import locust_request_count, read_records
from helpers.scenarios import write_corpus

pytestmark = pytest.mark.slow  # real locust processes


def base_args(url, tmp_path, *extra):
    corpus = write_corpus(tmp_path / "c.jsonl", 1200)
    return ["--headless", "-u", "4", "-r", "4", "-t", "3s", "--host", url, "--corpus", str(corpus),
            "--min-distinct", "1000", "--max-tokens", "64", "--results-dir", str(tmp_path / "out"),
            "--json-file", str(tmp_path / "locust"), "--only-summary", *extra]


@pytest.mark.parametrize("stream_flag", [[], ["--no-stream"]])
def test_locustfile_run_writes_one_record_per_locust_request(fake_llm, tmp_path, stream_flag):
    p = run_locust(base_args(fake_llm, tmp_path, "--dialect", "openai-chat", "--model", "ok", *stream_flag))
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    recs = read_records(tmp_path / "out")
    n, failures = locust_request_count(tmp_path / "locust")
    cancelled = [r for r in recs if r["error_kind"] == "cancelled"]
    # every finished request is one Locust request; those cut by the stop are recorded but are
    # not Locust failures (a timed run must not "fail" a CI pipeline)
    assert len(recs) - len(cancelled) == n > 8 and failures == 0
    assert p.returncode == 0, p.stderr[-2000:]
    ok = [r for r in recs if r["ok"]]
    assert len(ok) == n and len(cancelled) <= 4  # at most one cancelled request per user at the stop
    assert all(r["error_kind"] == "cancelled" for r in recs if not r["ok"])
    assert all(r["output_tokens"] == FAKE_TOKENS and r["stream"] == (not stream_flag) for r in ok)
    assert len({r["prompt_id"] for r in recs}) == len(recs)  # sampled without replacement
    assert (tmp_path / "out" / "meta.json").exists() and (tmp_path / "out" / "llm_stats.csv").exists()


def test_swarm_keeps_going_through_failures(fake_llm, tmp_path):
    p = run_locust(base_args(fake_llm, tmp_path, "--model", "cut"))
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    recs = read_records(tmp_path / "out")
    assert len(recs) > 20 and all(not r["ok"] for r in recs)
    assert {r["error_kind"] for r in recs} <= {"stream_cut", "cancelled"}
    n, failures = locust_request_count(tmp_path / "locust")
    cut = [r for r in recs if r["error_kind"] == "stream_cut"]
    assert n == failures == len(cut)  # every server failure a Locust failure, none lost


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dialect", "grpc-magic"], "unknown dialect 'grpc-magic'"),
        (["--corpus", "/nonexistent/prompts.jsonl"], "/nonexistent/prompts.jsonl"),
        (["--api-key-env", "SURELY_UNSET_KEY_VAR"], "SURELY_UNSET_KEY_VAR"),
        (["--header", "no-colon-here"], "--header"),
    ],
)
def test_bad_options_exit_2_with_one_line(fake_llm, tmp_path, extra, message):
    args = base_args(fake_llm, tmp_path)
    if "--corpus" in extra:
        i = args.index("--corpus")
        del args[i : i + 2]
    p = run_locust([*args, *extra], timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    assert message in p.stderr


def test_a_second_run_never_appends_to_another_runs_records(fake_llm, tmp_path):
    args = base_args(fake_llm, tmp_path, "--model", "ok")
    run_locust(args)  # plain Locust exits 1 when any request failed (cancelled ones at the stop)
    first = read_records(tmp_path / "out")
    assert first
    p = run_locust(args, timeout=60)  # the same --results-dir again
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "already holds requests.jsonl" in p.stderr
    assert read_records(tmp_path / "out") == first  # untouched


def test_run_time_counts_from_the_start_not_from_importing_locust(fake_llm, tmp_path):
    # gevent's hub exists from `import locust`; a slow start after it (here 3 s of imports) left its
    # clock behind, and a 2 s --run-time fired at once: the run sent nothing
    slow = tmp_path / "slow_locustfile.py"
    slow.write_text("import time\n_t = time.monotonic()\nwhile time.monotonic() - _t < 3:\n    pass\n"
                    "from capacity_plugins.locustfile import LLM  # noqa: E402,F401\n")
    args = base_args(fake_llm, tmp_path, "--model", "ok")
    args[args.index("-t") + 1] = "2s"
    p = run_locust(args, locustfile=slow)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert sum(r["ok"] for r in read_records(tmp_path / "out")) >= 4, p.stderr[-3000:]
