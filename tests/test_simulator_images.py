"""Image inputs on the simulator: the documented tile rule, the exact image tokens in usage for
OpenAI `image_url` (data: URI or URL) and Ollama `images`, and the prefill they cost."""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.request

import pytest
from PIL import Image

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.images import tiles

CFG = SimConfig()
PREFILL = 20000.0  # tokens/s, the default


@pytest.mark.parametrize(("size", "expected"), [  # the examples docs/simulator.md and images.py give
    ((224, 224), 1), ((448, 448), 1), ((896, 448), 3), ((1024, 1024), 10), ((4000, 3000), 13)])
def test_an_images_tiles_follow_the_documented_rule(size, expected):
    assert tiles(*size, CFG) == expected
    assert tiles(*size, CFG.replace(image_tile_px=224, image_max_tiles=40)) >= expected  # smaller tiles: more


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (w % 256, h % 256, 7)).save(buf, "PNG")
    return buf.getvalue()


def _post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _chat(url: str, parts: list) -> dict:
    return _post(url, "/v1/chat/completions", {"model": "sim-model", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "describe these"}, *parts]}]})


def _data_uri(w: int, h: int) -> dict:
    uri = "data:image/png;base64," + base64.b64encode(_png(w, h)).decode()
    return {"type": "image_url", "image_url": {"url": uri}}


def test_image_tokens_are_in_usage_exactly_and_prefilled(start_simulator, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_simulator(truth_log=truth)
    per_tile = CFG.image_tokens_per_tile
    text_only = _chat(sim.url, [])["usage"]["prompt_tokens"]
    two = _chat(sim.url, [_data_uri(896, 448), _data_uri(224, 224)])["usage"]["prompt_tokens"]
    assert two - text_only == (3 + 1) * per_tile  # 896 × 448: 2 tiles + thumbnail; 224 × 224: 1
    remote = _chat(sim.url, [{"type": "image_url", "image_url": {"url": "https://example.invalid/a.jpg"}}])
    assert remote["usage"]["prompt_tokens"] - text_only == per_tile  # not fetched: one tile
    # Ollama's base64 images: the same rule, in prompt_eval_count
    ollama = {"model": "sim-model", "stream": False, "options": {"num_predict": 2}}
    plain = _post(sim.url, "/api/chat", {**ollama, "messages": [{"role": "user", "content": "describe"}]})
    with_img = _post(sim.url, "/api/chat", {**ollama, "messages": [
        {"role": "user", "content": "describe", "images": [base64.b64encode(_png(1024, 1024)).decode()]}]})
    assert with_img["prompt_eval_count"] - plain["prompt_eval_count"] == 10 * per_tile
    # a bad image is the server's 400, one line
    with pytest.raises(urllib.error.HTTPError) as e:
        _chat(sim.url, [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])
    assert e.value.code == 400 and b"not an image" in e.value.read()
    sim.stop()
    # the images' tokens were prefilled: the request with two images spent at least their prefill time
    lines = [json.loads(x) for x in truth.read_text().splitlines() if x.strip()]
    by_tokens = {x["prompt_tokens"]: x for x in lines if x["status"] == 200}
    assert by_tokens[two]["prefill_s"] >= two / PREFILL
