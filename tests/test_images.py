"""Image inputs on the client: a corpus that names images per prompt, synthetic images of a given
size, both sent by openai-chat (`image_url`) and ollama (`images`); the records' image fields, the
summary's latency by image count, `capacity corpus stats` on an image corpus — and one sweep on
the simulator whose prompt counts are known exactly from its tile rule."""

from __future__ import annotations

import base64
import io
import json

import orjson
import pytest
import yaml
from helpers.processes import capacity
from helpers.results import read_records, results_dir
from helpers.scenarios import scenario_error, write_yaml
from helpers.users import local_user
from PIL import Image

from capacity_plugins.contracts.images import TileRule, image_tokens, parse_size
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.corpus import load_corpus
from capacity_plugins.corpus.images import synthetic_images
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.dialects import RequestParams, get_dialect
from capacity_plugins.errors import UserError


def _png(path, size):
    Image.new("RGB", size, (40, 90, 200)).save(path, "PNG")
    return path


def _decoded(data_uri_or_b64: str) -> Image.Image:
    payload = data_uri_or_b64.split(",", 1)[1] if data_uri_or_b64.startswith("data:") else data_uri_or_b64
    return Image.open(io.BytesIO(base64.b64decode(payload)))


def test_the_tile_rule_gives_the_documented_counts():
    # the table of contracts/images.py and docs/simulator.md, counted by hand: tiles of 448 px,
    # capped at 12, a thumbnail on top of more than one, 256 tokens each
    assert [image_tokens(*wh) for wh in [(224, 224), (448, 448), (896, 448), (1024, 1024), (4000, 3000)]] \
        == [256, 256, 768, 2560, 3328]
    assert TileRule(tile_px=336, tokens_per_tile=144, max_tiles=4).tokens(672, 336) == 3 * 144
    assert parse_size("1024x768") == (1024, 768) and parse_size(" 64 X 32 ") == (64, 32)
    assert parse_size("1024") is None and parse_size("0x10") is None and parse_size("9000x10") is None


def test_a_corpus_names_images_by_path_url_or_data_and_a_bad_one_is_one_line(tmp_path):
    _png(tmp_path / "a.png", (448, 448))
    (tmp_path / "pics").mkdir()
    _png(tmp_path / "pics" / "b.png", (1024, 768))
    small = io.BytesIO()
    Image.new("RGB", (32, 16)).save(small, "PNG")
    data_uri = "data:image/png;base64," + base64.b64encode(small.getvalue()).decode()
    lines = [{"prompt": "what is in a?", "images": ["a.png"]},
             {"messages": [{"role": "user", "content": "compare"}], "images": ["pics/b.png", "https://x.example/c.jpg"]},
             {"prompt": "tiny", "images": [data_uri]},
             {"prompt": "what is in a?", "images": ["pics/b.png"]},  # the same text with another image
             {"prompt": "no image"}]
    corpus_file = tmp_path / "c.jsonl"
    corpus_file.write_text("".join(json.dumps(x) + "\n" for x in lines))
    c = load_corpus(corpus_file, min_distinct=5)  # five distinct prompts: images count in what is distinct
    a, b, tiny, again, plain = c.samples
    assert [(i.size, i.mime) for i in a.images] == [("448x448", "image/png")]
    assert [i.size for i in b.images] == ["1024x768", None] and b.images[1].url == "https://x.example/c.jpg"
    assert tiny.images[0].size == "32x16" and again.images[0].size == "1024x768" and plain.images == ()
    assert _decoded(a.images[0].uri()).size == (448, 448)

    st = c.stats()["images"]
    assert (st["prompts_with"], st["total"]) == (4, 5)
    assert st["resolutions"] == {"1024x768": 2, "32x16": 1, "448x448": 1, "unknown (URL)": 1}
    # per prompt by the tile rule: 256; 1792 + one tile for the URL; 256; 1792; 0
    assert st["image_tokens_est"]["max"] == 2048 and st["image_tokens_est"]["min"] == 0
    assert st["per_prompt"]["max"] == 2

    (tmp_path / "notimage.png").write_text("hello")
    for ref, why in (("missing.png", "no such image file"), ("notimage.png", "not an image Pillow can read"),
                     ("data:image/png;base64,AAAA", "not a base64 data: URI of an image")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"prompt": "ok"}\n' + json.dumps({"prompt": "x", "images": [ref]}) + "\n")
        with pytest.raises(UserError) as e:
            load_corpus(bad, min_distinct=0)
        assert str(e.value).startswith(f"{bad}:2: images[0] {ref[:80]!r}: {why}"), str(e.value)
        assert "\n" not in str(e.value)
    bad.write_text('{"prompt": "x", "images": "a.png"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:1: \"images\" must be a list"):
        load_corpus(bad, min_distinct=0)


def test_corpus_stats_describes_an_image_corpus_and_names_a_missing_image(tmp_path):
    _png(tmp_path / "a.png", (896, 448))
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"prompt": f"p{i}", "images": ["a.png"] * (i % 3)}) + "\n" for i in range(6)))
    r = capacity("corpus", "stats", str(good), "--min-distinct", "1", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "images       6 on 4 prompts; per prompt min 0" in r.stdout, r.stdout
    assert "resolutions  896x448 ×6" in r.stdout
    assert "image tokens (est) per prompt min 0" in r.stdout and "max 1536" in r.stdout  # 2 × (2 + 1) × 256
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": "b", "images": ["gone.jpg"]}\n')
    r = capacity("corpus", "stats", str(bad), "--min-distinct", "1", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith(f"{bad}:2: images[0] 'gone.jpg': no such image file "
                                                      f"({tmp_path / 'gone.jpg'})"), r.stderr


def test_synthetic_images_are_made_once_per_size_deterministic_and_distinct_within_a_request():
    one = synthetic_images(3, "320x200")
    assert synthetic_images(3, "320x200") is one  # cached: no work per request
    assert [(i.size, i.mime) for i in one] == [("320x200", "image/jpeg")] * 3
    assert len({i.base64() for i in one}) == 3  # the images of one request differ
    pixels = _decoded(one[0].base64())
    assert pixels.size == (320, 200) and pixels.format == "JPEG"
    assert synthetic_images(0, "320x200") == ()
    # deterministic across processes: the same bytes from a fresh interpreter
    from helpers.processes import python
    r = python("from capacity_plugins.corpus.images import synthetic_images as s; import hashlib; "
               "print(hashlib.sha256(s(3, '320x200')[2].base64().encode()).hexdigest())", timeout=60)
    import hashlib
    assert r.stdout.strip() == hashlib.sha256(one[2].base64().encode()).hexdigest()


def test_openai_chat_and_ollama_send_the_images_with_the_last_user_turn():
    images = synthetic_images(2, "64x48")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is this?"}]
    sample = Sample.make("p1", messages=messages, images=images)
    body = orjson.loads(get_dialect("openai-chat").build(sample, RequestParams(model="m")).body)
    system, user = body["messages"]
    assert system == {"role": "system", "content": "be brief"}
    assert user["content"][0] == {"type": "text", "text": "what is this?"}
    urls = [p["image_url"]["url"] for p in user["content"][1:]]
    assert [p["type"] for p in user["content"][1:]] == ["image_url"] * 2
    assert all(u.startswith("data:image/jpeg;base64,") for u in urls) and _decoded(urls[1]).size == (64, 48)
    assert messages[1] == {"role": "user", "content": "what is this?"}  # the corpus's own message is untouched

    body = orjson.loads(get_dialect("ollama").build(sample, RequestParams(model="m")).body)
    assert body["messages"][1]["content"] == "what is this?"
    assert [_decoded(x).size for x in body["messages"][1]["images"]] == [(64, 48)] * 2

    url = Sample.make("p2", prompt="and this?", images=(images[0].__class__(url="https://x.example/i.png"),))
    body = orjson.loads(get_dialect("openai-chat").build(url, RequestParams(model="m")).body)
    assert body["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x.example/i.png"}}
    # a text-only prompt is sent as before: a plain string content
    body = orjson.loads(get_dialect("openai-chat").build(Sample.make("p3", prompt="hi"), RequestParams()).body)
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_images_need_a_dialect_that_sends_them_and_a_size_in_pixels(tmp_path):
    msg = scenario_error(tmp_path, "target: {url: embedded, dialect: tgi}\nrequest: {images: 2}\n")
    assert msg.endswith("request.images: the tgi dialect cannot send images; use one of openai-chat, ollama "
                        "(or images: 0)"), msg
    msg = scenario_error(tmp_path, "target: {url: embedded}\nrequest: {images: 1, image_size: big}\n")
    assert "request.image_size" in msg and "WIDTHxHEIGHT" in msg
    msg = scenario_error(tmp_path, "target: {url: embedded, dialect: openai-completions}\nslo: {ttft_p95_ms: 500}\n"
                                   "workloads: [{name: a, request: {images: 1}}]\n")
    assert "workloads[0].request.images: the openai-completions dialect cannot send images" in msg
    with pytest.raises(UserError, match="^--image-size: must be WIDTHxHEIGHT"):
        LLMOptions(images=1, image_size="10")
    # a class's images travel with its request settings, so its lane sends them
    from capacity_plugins.rehearsal.workloads import specs_from_scenario
    from capacity_plugins.scenario import load_scenario
    s = load_scenario(write_yaml(tmp_path, "target: {url: embedded}\nslo: {ttft_p95_ms: 500}\n"
                                           "request: {image_size: 448x448}\n"
                                           "workloads: [{name: a, request: {images: 2}}, {name: b}]\n"))
    assert [w.request for w in specs_from_scenario(s)] == [{"images": 2}, {}]
    assert s.options().image_size == "448x448" and s.options().images == 0


@pytest.mark.slow  # `capacity run`
def test_a_corpus_with_images_and_a_text_only_dialect_is_refused_before_the_run(tmp_path):
    _png(tmp_path / "a.png", (64, 64))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"prompt": "x", "images": ["a.png"]}) + "\n")
    sc = write_yaml(tmp_path, yaml.safe_dump({"target": {"url": "embedded", "dialect": "tgi"},
                                              "corpus": {"path": str(corpus), "min_distinct": 1}}))
    r = capacity("run", str(sc), timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "prompt '1' names images, which the tgi dialect cannot send" in r.stderr, r.stderr


@pytest.mark.parametrize("dialect", ["openai-chat", "ollama"])
def test_each_image_dialect_reaches_the_simulator_which_counts_the_tile_rule(start_simulator, tmp_path, dialect):
    # the same first prompt (sequential sampling of one corpus) with and without two 896 × 448
    # images: the server's prompt count differs by exactly 2 × 768 tokens (2 tiles + a thumbnail)
    sim = start_simulator()
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"prompt": f"question {i}: what is shown?"}) + "\n" for i in range(20)))
    plain = local_user(sim.url, tmp_path / "plain", corpus=str(corpus), dialect=dialect, model="sim-model", max_tokens=2)
    shown = local_user(sim.url, tmp_path / "img", corpus=str(corpus), dialect=dialect, model="sim-model", max_tokens=2, images=2,
                       image_size="896x448")
    a, b = plain.call(), shown.call()
    assert a.ok and b.ok, (a.error, b.error)
    assert b.prompt_tokens - a.prompt_tokens == 2 * 768
    assert (a.images, a.image_sizes, b.images, b.image_sizes) == (None, None, 2, ["896x448"] * 2)


# -- one sweep on the simulator -------------------------------------------------------------

# Every prompt is 40 ASCII characters: 10 tokens by the simulator's text rule (a run of 4
# characters each), + 3 for the user message's template + 3 for the reply's = 16 (docs/simulator.md).
TEXT_TOKENS = 16
SYNTH = "896x448"  # 2 tiles + the thumbnail = 3 × 256 = 768 tokens per image
PER_SYNTH = 768
# the "files" class's corpus names two files each: 448 × 448 (1 tile, 256) and 1024 × 768
# (3 × 2 tiles + the thumbnail = 7, 1792)
FILES_TOKENS = 256 + 1792
PREFILL_TOKENS_PER_S = 20000.0  # the simulator's default: an image of 768 tokens is 38.4 ms of prefill
EXPECTED = {"text": (0, TEXT_TOKENS), "one": (1, TEXT_TOKENS + PER_SYNTH),
            "two": (2, TEXT_TOKENS + 2 * PER_SYNTH), "files": (2, TEXT_TOKENS + FILES_TOKENS)}


def _prompt(i: int, what: str) -> str:
    text = f"{what} {i:05d}, in brief"
    assert len(text) <= 40
    return text + "." * (40 - len(text))


@pytest.fixture(scope="module")
def vlm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vlm")
    _png(tmp / "a.png", (448, 448))
    _png(tmp / "b.png", (1024, 768))
    (tmp / "text.jsonl").write_text("".join(json.dumps({"prompt": _prompt(i, "Describe picture")}) + "\n"
                                            for i in range(600)))
    (tmp / "files.jsonl").write_text("".join(json.dumps({"prompt": _prompt(i, "Compare photos"), "images":
                                                         ["a.png", "b.png"]}) + "\n" for i in range(300)))
    doc = {
        "name": "vlm-test",
        "target": {"url": "embedded", "dialect": "openai-chat", "simulator": {"max_model_len": 8192}},
        "corpus": {"path": str(tmp / "text.jsonl"), "min_distinct": 100},
        "request": {"max_tokens": 4, "ignore_eos": True, "timeout_s": 30, "image_size": SYNTH},
        "load": {"kind": "concurrency_sweep", "levels": [2], "step_s": 8, "warmup_s": 1, "min_requests": 10,
                 "max_loop_lag_p99_ms": 500},
        "slo": {"ttft_p95_ms": 1000},
        "workloads": [{"name": "text"}, {"name": "one", "request": {"images": 1}},
                      {"name": "two", "request": {"images": 2}},
                      {"name": "files", "corpus": {"path": str(tmp / "files.jsonl")}}],
        "output": str(tmp / "results"),
    }
    r = capacity("run", str(write_yaml(tmp, yaml.safe_dump(doc))), timeout=120)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]  # 1: an SLO verdict, not a failure
    return results_dir(r.stdout)


@pytest.mark.slow
@pytest.mark.measured  # TTFT by image count against the prefill time the images cost
def test_prompt_tokens_are_text_plus_the_tile_rule_and_ttft_grows_with_images(vlm_run):
    folder = vlm_run
    recs = [x for x in read_records(folder) if x["ok"]]
    assert {x["workload"] for x in recs} == set(EXPECTED)
    for x in recs:
        n, tokens = EXPECTED[x["workload"]]
        assert (x["images"] or 0, x["prompt_tokens"]) == (n, tokens), x
    sizes = {x["workload"]: x["image_sizes"] for x in recs}
    assert sizes == {"text": None, "one": [SYNTH], "two": [SYNTH] * 2, "files": ["448x448", "1024x768"]}

    s = json.loads((folder / "summary.json").read_text())
    (step,) = s["images"]["steps"]
    groups = {g["images"]: g for g in step["groups"]}
    assert sorted(groups) == [0, 1, 2]
    assert groups[0]["prompt_tokens_mean"] == TEXT_TOKENS and groups[1]["prompt_tokens_mean"] == TEXT_TOKENS + PER_SYNTH
    # each image's prefill comes before the first token: at 2 users (queueing small) the median
    # TTFT grows by at least half an image's prefill per image
    one_image_ms = PER_SYNTH / PREFILL_TOKENS_PER_S * 1000
    assert groups[1]["ttft_p50_ms"] - groups[0]["ttft_p50_ms"] > one_image_ms / 2, groups
    assert groups[2]["ttft_p50_ms"] - groups[1]["ttft_p50_ms"] > one_image_ms / 2, groups
    assert s["images"]["ttft_p50_ms_per_image"] > one_image_ms / 2
    line = s["images"]["line"]
    assert line.startswith("TTFT p50 by images per request at level 2: 0 images ") and "each image adds about" in line
    md = (folder / "summary.md").read_text()
    assert "## Images" in md and f"- {line}" in md
    assert 'id="image-steps"' in (folder / "report.html").read_text()
    assert f"- images: {line}" in md  # the headline's details, with the capacity
