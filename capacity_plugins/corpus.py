"""Prompt corpora: load, validate, describe, and hand out samples to users without repeats.

Sources (`load_corpus(source)`):

- ``builtin`` — the shipped corpus (`data/builtin.jsonl.gz`, 6000 distinct prompts, Chinese and
  English, short questions to multi-section documents; distribution in `corpus_build` and
  `data/README.md`). ``builtin:long`` — the long-context boundary set (≈ 8k / 16k / 32k
  estimated tokens, four prompts each), generated on demand; it is exempt from `min_distinct`.
- a file: ``.jsonl`` (also ``.jsonl.gz``) with one ``{"prompt": str}`` or
  ``{"messages": [{"role", "content"}, ...]}`` object per line and optional ``"max_tokens"`` /
  ``"id"``; ``.csv`` with a ``prompt`` column (optional ``max_tokens`` / ``id``); ShareGPT
  ``.json`` (a list of ``{"id", "conversations": [{"from": "human", "value"}, ...]}``: the first
  human turn is the prompt, and, as vLLM's benchmark does, the following reply's estimated length
  becomes ``max_tokens``), or a ``.json`` list of JSONL-style objects; ``.parquet`` (columns as
  for CSV; needs pyarrow).
- ``synthetic:prompt_tokens=512,output_tokens=128,n=2000,seed=1[,lang=en|zh|mix]`` — random text
  of a given estimated length, the way `vllm bench serve --dataset-name random` and genai-perf's
  synthetic inputs are built. Each length is a number (fixed) or ``fixed(N)``,
  ``uniform(LO,HI)``, ``normal(MEAN,SD)`` (clamped to ≥ 1). ``output_tokens`` becomes each
  sample's ``max_tokens`` (pair it with ``--ignore-eos`` for exact output lengths).

Validation: at least `min_distinct` distinct prompts (default 1000, the seeds' minimum: repeated
prompts hit the server's prefix cache and flatter every latency). Errors raise `UserError` with
the file and line (``corpus.jsonl:17: missing "prompt" or "messages"``).

Token estimate (`estimate_tokens`): each CJK character (ideographs, kana, hangul, CJK and
full-width punctuation) counts 1; the remaining characters count 1 per 4, rounded up. It is only
for describing a corpus and sizing synthetic prompts: the server's own count is the truth.

Sampling (`Corpus.sampler`): each worker takes the shard ``(shard_index, shard_count)`` of one
seeded permutation of the corpus, so shards are disjoint and together cover every prompt; no
prompt is sent twice across the swarm until a shard is exhausted. ``shuffle`` (default) walks the
shard in seeded random order and reshuffles it with a derived seed on each wrap; ``sequential``
walks it in file order; ``random`` draws from it with replacement. Each wrap is counted and
logged as a warning.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import logging
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.errors import UserError

__all__ = ["Corpus", "Sample", "Sampler", "estimate_tokens", "load_corpus"]

logger = logging.getLogger("capacity_plugins.corpus")

DEFAULT_MIN_DISTINCT = 1000
SAMPLING_MODES = ("shuffle", "sequential", "random")
# A prefix shorter than this (estimated tokens) is shared harmlessly (a greeting, "Summarise:");
# longer shared prefixes let the server's prefix cache skip prefill, which flatters TTFT.
LONG_PREFIX_TOKENS = 128

_CJK_RE = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0002fa1f]"
)


def estimate_tokens(text: str) -> int:
    """CJK characters count 1 token each; everything else ≈ 4 characters per token (rounded up)."""
    cjk = len(_CJK_RE.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def _is_cjk_text(text: str) -> bool:
    sample = text[:2000]
    letters = sum(1 for ch in sample if not ch.isspace())
    return letters > 0 and len(_CJK_RE.findall(sample)) / letters >= 0.3


@dataclass(frozen=True)
class Sample:
    """One prompt. Exactly one of `prompt` / `messages` is set."""

    id: str
    prompt: str | None
    messages: list[dict[str, Any]] | None
    max_tokens: int | None
    prompt_chars: int
    prompt_tokens_est: int

    @property
    def text(self) -> str:
        """The prompt, or the messages' contents joined by blank lines (for prompt-only dialects)."""
        if self.prompt is not None:
            return self.prompt
        return "\n\n".join(_content_text(m.get("content")) for m in self.messages or ())

    def as_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.prompt}]

    @classmethod
    def make(cls, id: str, *, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
             max_tokens: int | None = None) -> Sample:
        text = prompt if prompt is not None else "\n\n".join(_content_text(m.get("content")) for m in messages or ())
        return cls(id=id, prompt=prompt, messages=messages, max_tokens=max_tokens,
                   prompt_chars=len(text), prompt_tokens_est=estimate_tokens(text))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _percentiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    n = len(s)

    def rank(q: float) -> int:  # nearest rank, as everywhere in this project (stats.py)
        return s[min(n, max(1, math.ceil(q * n))) - 1]

    return {"min": s[0], "p10": rank(0.10), "p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99),
            "max": s[-1], "mean": round(sum(s) / n, 1)}


def _long_prefix(text: str) -> str | None:
    """The first LONG_PREFIX_TOKENS estimated tokens of text, or None when it is shorter."""
    head = text[: LONG_PREFIX_TOKENS * 4]
    if estimate_tokens(head) < LONG_PREFIX_TOKENS:
        return None
    # The estimate grows with the prefix length: binary-search the shortest prefix reaching it.
    lo, hi = 1, len(head)
    while lo < hi:
        mid = (lo + hi) // 2
        if estimate_tokens(head[:mid]) >= LONG_PREFIX_TOKENS:
            hi = mid
        else:
            lo = mid + 1
    return head[:lo]


@dataclass
class Corpus:
    samples: list[Sample]
    source: str
    sha256: str
    exempt_min_distinct: bool = field(default=False, repr=False)

    def __len__(self) -> int:
        return len(self.samples)

    def distinct_count(self) -> int:
        return len({s.text for s in self.samples})

    def stats(self) -> dict[str, Any]:
        texts = [s.text for s in self.samples]
        distinct = set(texts)
        groups: dict[str, int] = {}
        for t in distinct:
            p = _long_prefix(t)
            if p is not None:
                groups[p] = groups.get(p, 0) + 1
        shared = [n for n in groups.values() if n > 1]
        zh = sum(1 for t in texts if _is_cjk_text(t))
        with_max = [s.max_tokens for s in self.samples if s.max_tokens is not None]
        return {
            "source": self.source,
            "sha256": self.sha256,
            "count": len(texts),
            "distinct": len(distinct),
            "duplicates": len(texts) - len(distinct),
            "messages_samples": sum(1 for s in self.samples if s.messages is not None),
            "shared_long_prefix": {
                "prefix_tokens_est": LONG_PREFIX_TOKENS,
                "groups": len(shared),
                "prompts": sum(shared),
                "largest_group": max(shared, default=0),
            },
            "prompt_chars": _percentiles([s.prompt_chars for s in self.samples]),
            "prompt_tokens_est": _percentiles([s.prompt_tokens_est for s in self.samples]),
            "languages": {"zh": round(zh / len(texts), 4) if texts else 0.0,
                          "en": round(1 - zh / len(texts), 4) if texts else 0.0},
            "max_tokens": {"samples_with": len(with_max), **({"p50": _percentiles(with_max)["p50"]} if with_max else {})},
        }

    def sampler(self, mode: str = "shuffle", seed: int = 42, shard_index: int = 0, shard_count: int = 1) -> Sampler:
        return Sampler(self, mode=mode, seed=seed, shard_index=shard_index, shard_count=shard_count)


class Sampler:
    """Hands out the samples of one shard; see the module docstring for the modes.

    Not thread-safe across OS threads; fine for gevent greenlets (no yield inside `next`).
    """

    def __init__(self, corpus: Corpus, *, mode: str = "shuffle", seed: int = 42,
                 shard_index: int = 0, shard_count: int = 1) -> None:
        if mode not in SAMPLING_MODES:
            raise UserError(f"sampling mode {mode!r} unknown (choose from {', '.join(SAMPLING_MODES)})")
        if shard_count < 1 or not 0 <= shard_index < shard_count:
            raise UserError(f"corpus shard {shard_index} of {shard_count} is not valid")
        n = len(corpus.samples)
        if n < shard_count:
            raise UserError(f"corpus {corpus.source} has {n} prompts, fewer than the {shard_count} workers sharing it")
        self.corpus = corpus
        self.mode = mode
        self.seed = seed
        self.shard_index = shard_index
        self.shard_count = shard_count
        order = list(range(n))
        if mode != "sequential":
            # One permutation for the whole swarm (same seed everywhere), then a strided slice:
            # the shards are disjoint and their union is the corpus.
            random.Random(f"corpus-shards:{seed}").shuffle(order)
        self._shard = order[shard_index::shard_count]
        self._rng = random.Random(f"corpus-draw:{seed}:{shard_index}")
        self._order = list(self._shard)
        if mode == "shuffle":
            self._rng.shuffle(self._order)
        self._pos = 0
        self.wraps = 0
        self.sent = 0

    @property
    def shard_size(self) -> int:
        return len(self._shard)

    def next(self) -> Sample:
        samples = self.corpus.samples
        self.sent += 1
        if self.mode == "random":
            return samples[self._shard[int(self._rng.random() * len(self._shard))]]
        if self._pos >= len(self._order):
            self.wraps += 1
            self._pos = 0
            if self.mode == "shuffle":
                self._order = list(self._shard)
                random.Random(f"corpus-wrap:{self.seed}:{self.shard_index}:{self.wraps}").shuffle(self._order)
            logger.warning(
                "corpus %s: shard %d/%d (%d prompts) exhausted after %d sent; starting again (wrap %d) — "
                "repeated prompts may hit the server's prefix cache; use a larger corpus",
                self.corpus.source, self.shard_index, self.shard_count, len(self._shard),
                self.sent - 1, self.wraps,
            )
        s = samples[self._order[self._pos]]
        self._pos += 1
        return s

    __next__ = next

    def __iter__(self) -> Sampler:
        return self


# --------------------------------------------------------------------------------------------
# Loading


def load_corpus(source: str | Path, *, min_distinct: int = DEFAULT_MIN_DISTINCT,
                max_tokens_field: bool = True) -> Corpus:
    src = str(source)
    if src == "builtin":
        corpus = _load_builtin()
    elif src == "builtin:long":
        corpus = _load_long()
    elif src.startswith("synthetic:") or src == "synthetic":
        corpus = _load_synthetic(src)
    else:
        corpus = _load_file(Path(source), src)
    if not max_tokens_field:
        corpus.samples = [
            s if s.max_tokens is None else Sample(s.id, s.prompt, s.messages, None, s.prompt_chars, s.prompt_tokens_est)
            for s in corpus.samples
        ]
    if not corpus.samples:
        raise UserError(f"{src}: empty corpus (no prompts)")
    if not corpus.exempt_min_distinct:
        distinct = corpus.distinct_count()
        if distinct < min_distinct:
            raise UserError(
                f"{src}: only {distinct} distinct prompts ({len(corpus.samples)} in total), fewer than the "
                f"required {min_distinct}: repeated prompts hit the server's prefix cache and flatter latency; "
                f"add prompts, or lower the limit with --min-distinct N (min_distinct in a scenario)"
            )
    return corpus


def _builtin_path() -> Path:
    from capacity_plugins.corpus_build import BUILTIN_FILE, DATA_DIR

    return DATA_DIR / BUILTIN_FILE


def _load_builtin() -> Corpus:
    path = _builtin_path()
    if not path.exists():
        raise UserError(f"builtin corpus missing at {path}; regenerate it with `capacity corpus build`")
    data = gzip.decompress(path.read_bytes())
    samples = _parse_jsonl(data, "builtin", max_tokens_field=True)
    return Corpus(samples, "builtin", hashlib.sha256(data).hexdigest())


def _load_long() -> Corpus:
    from capacity_plugins.corpus_build import long_records, to_jsonl

    data = to_jsonl(long_records())
    samples = _parse_jsonl(data, "builtin:long", max_tokens_field=True)
    return Corpus(samples, "builtin:long", hashlib.sha256(data).hexdigest(), exempt_min_distinct=True)


def _load_file(path: Path, label: str) -> Corpus:
    name = path.name.lower()
    kinds = (".jsonl", ".jsonl.gz", ".csv", ".json", ".parquet")
    kind = next((k for k in kinds if name.endswith(k)), None)
    if kind is None:
        raise UserError(f"{label}: unknown corpus format (expected one of {', '.join(kinds)}, "
                        f"'builtin', 'builtin:long' or 'synthetic:...')")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{label}: no such corpus file") from None
    except OSError as e:
        raise UserError(f"{label}: cannot read ({e.strerror or e})") from None
    digest = hashlib.sha256(raw).hexdigest()
    if kind == ".jsonl.gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise UserError(f"{label}: not a valid gzip file ({e})") from None
    if kind in (".jsonl", ".jsonl.gz"):
        samples = _parse_jsonl(raw, label, max_tokens_field=True)
    elif kind == ".csv":
        samples = _parse_csv(raw, label)
    elif kind == ".json":
        samples = _parse_json(raw, label)
    else:
        samples = _parse_parquet(path, label)
    return Corpus(samples, label, digest)


def _decode(raw: bytes, label: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise UserError(f"{label}:{line}: not valid UTF-8 (byte {e.start})") from None


class _Ids:
    """Checks id uniqueness: prompt ids end up in requests.jsonl and must name one prompt."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.seen: dict[str, str] = {}

    def take(self, raw_id: Any, default: str, where: str) -> str:
        if raw_id is None:
            pid = default
        elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool):
            pid = str(raw_id)
        else:
            raise UserError(f"{self.label}:{where}: \"id\" must be a string or an integer")
        if pid in self.seen:
            raise UserError(f"{self.label}:{where}: duplicate id {pid!r} (first at {self.seen[pid]})")
        self.seen[pid] = where
        return pid


def _max_tokens(value: Any, label: str, where: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise UserError(f"{label}:{where}: \"max_tokens\" must be a positive integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise UserError(f"{label}:{where}: \"max_tokens\" must be a positive integer, got {value!r}") from None
    if not isinstance(value, int) or value < 1:
        raise UserError(f"{label}:{where}: \"max_tokens\" must be a positive integer, got {value!r}")
    return value


def _validate_messages(msgs: Any, label: str, where: str) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs:
        raise UserError(f"{label}:{where}: \"messages\" must be a non-empty list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise UserError(f"{label}:{where}: messages[{i}] needs a \"role\" string")
        c = m.get("content")
        if not isinstance(c, (str, list)):
            raise UserError(f"{label}:{where}: messages[{i}] needs a \"content\" string (or list of parts)")
    if not any(_content_text(m.get("content")).strip() for m in msgs):
        raise UserError(f"{label}:{where}: \"messages\" have no text")
    return msgs


def _sample_from_obj(obj: Any, label: str, where: str, default_id: str, ids: _Ids,
                     max_tokens_field: bool) -> Sample:
    if not isinstance(obj, dict):
        raise UserError(f"{label}:{where}: expected a JSON object, got {type(obj).__name__}")
    has_p, has_m = "prompt" in obj, "messages" in obj
    if has_p and has_m:
        raise UserError(f"{label}:{where}: has both \"prompt\" and \"messages\"; keep one")
    if not has_p and not has_m:
        raise UserError(f"{label}:{where}: missing \"prompt\" or \"messages\"")
    pid = ids.take(obj.get("id"), default_id, where)
    mt = _max_tokens(obj.get("max_tokens"), label, where) if max_tokens_field else None
    if has_p:
        p = obj["prompt"]
        if not isinstance(p, str) or not p.strip():
            raise UserError(f"{label}:{where}: \"prompt\" must be a non-empty string")
        return Sample.make(pid, prompt=p, max_tokens=mt)
    return Sample.make(pid, messages=_validate_messages(obj["messages"], label, where), max_tokens=mt)


def _parse_jsonl(raw: bytes, label: str, *, max_tokens_field: bool) -> list[Sample]:
    text = _decode(raw, label)
    ids = _Ids(label)
    out: list[Sample] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise UserError(f"{label}:{lineno}: invalid JSON ({str(e).split(':')[0]})") from None
        out.append(_sample_from_obj(obj, label, str(lineno), str(lineno), ids, max_tokens_field))
    return out


def _rows_to_samples(rows: list[tuple[str, dict[str, Any]]], columns: list[str], label: str) -> list[Sample]:
    lower = {c.strip().lower(): c for c in columns if c is not None}
    if "prompt" not in lower:
        raise UserError(f"{label}:1: no \"prompt\" column (columns: {', '.join(map(str, columns)) or 'none'})")
    pc, mc, ic = lower["prompt"], lower.get("max_tokens"), lower.get("id")
    ids = _Ids(label)
    out = []
    for where, row in rows:
        p = row.get(pc)
        if not isinstance(p, str) or not p.strip():
            raise UserError(f"{label}:{where}: empty \"prompt\"")
        raw_id = row.get(ic) if ic else None
        if raw_id == "" or (isinstance(raw_id, float) and math.isnan(raw_id)):
            raw_id = None
        if isinstance(raw_id, float) and raw_id.is_integer():
            raw_id = int(raw_id)
        mt_raw = row.get(mc) if mc else None
        if isinstance(mt_raw, float) and math.isnan(mt_raw):
            mt_raw = None
        pid = ids.take(raw_id, where, where)
        out.append(Sample.make(pid, prompt=p, max_tokens=_max_tokens(mt_raw, label, where)))
    return out


def _parse_csv(raw: bytes, label: str) -> list[Sample]:
    text = _decode(raw, label)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        columns = list(reader.fieldnames or [])
        rows = []
        start = reader.line_num + 1
        for row in reader:
            rows.append((str(start), row))
            start = reader.line_num + 1  # multi-line quoted cells: name the row's first line
    except csv.Error as e:
        raise UserError(f"{label}:{reader.line_num}: bad CSV ({e})") from None
    if not columns:
        raise UserError(f"{label}: empty file (no header row)")
    return _rows_to_samples(rows, columns, label)


def _parse_parquet(path: Path, label: str) -> list[Sample]:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UserError(f"{label}: reading Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    import pandas as pd

    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises many types for a bad file; report it as bad input
        raise UserError(f"{label}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    rows = [(f"row {i + 1}", {k: (v.item() if hasattr(v, "item") else v) for k, v in rec.items()})
            for i, rec in enumerate(df.to_dict("records"))]
    return _rows_to_samples(rows, [str(c) for c in df.columns], label)


def _parse_json(raw: bytes, label: str) -> list[Sample]:
    text = _decode(raw, label)
    if not text.strip():
        raise UserError(f"{label}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{label}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(data, list):
        raise UserError(f"{label}: expected a JSON list (ShareGPT format or prompt objects), got {type(data).__name__}")
    ids = _Ids(label)
    out = []
    for i, item in enumerate(data):
        where = f"item {i}"
        if isinstance(item, dict) and "conversations" in item:
            s = _sharegpt_sample(item, label, where, ids)
            if s is not None:
                out.append(s)
        else:
            out.append(_sample_from_obj(item, label, where, str(i), ids, True))
    return out


def _sharegpt_sample(item: dict[str, Any], label: str, where: str, ids: _Ids) -> Sample | None:
    conv = item["conversations"]
    if not isinstance(conv, list):
        raise UserError(f"{label}:{where}: \"conversations\" must be a list")
    for j, turn in enumerate(conv):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise UserError(f"{label}:{where}: conversations[{j}] needs \"from\" and a \"value\" string")
        if turn.get("from") in ("human", "user") and turn["value"].strip():
            reply = conv[j + 1] if j + 1 < len(conv) else None
            mt = None
            if isinstance(reply, dict) and reply.get("from") in ("gpt", "assistant", "chatgpt", "bard") \
                    and isinstance(reply.get("value"), str) and reply["value"].strip():
                mt = estimate_tokens(reply["value"])
            pid = ids.take(item.get("id"), where.replace("item ", ""), where)
            return Sample.make(pid, prompt=turn["value"], max_tokens=mt)
    return None  # ShareGPT dumps contain conversations with no human turn; vLLM skips them too


# --------------------------------------------------------------------------------------------
# Synthetic

_SYNTH_KEYS = ("prompt_tokens", "output_tokens", "n", "seed", "lang")
_DIST_RE = re.compile(r"^(fixed|uniform|normal)\(([^)]*)\)$")


def _parse_synth_spec(src: str) -> dict[str, str]:
    body = src[len("synthetic:"):] if src.startswith("synthetic:") else ""
    out: dict[str, str] = {}
    # Split on commas that are not inside parentheses: normal(512,64) is one value.
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?[^,]*", body):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise UserError(f"{src}: expected key=value, got {part!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in _SYNTH_KEYS:
            raise UserError(f"{src}: unknown key {k!r} (known: {', '.join(_SYNTH_KEYS)})")
        out[k] = v
    return out


def _length_drawer(spec: str, key: str, src: str) -> Any:
    def bad() -> UserError:
        return UserError(f"{src}: {key}={spec!r} is not a length (use N, fixed(N), uniform(LO,HI) or normal(MEAN,SD))")

    if re.fullmatch(r"\d+", spec):
        n = int(spec)
        return lambda rng: max(1, n)
    m = _DIST_RE.match(spec.replace(" ", ""))
    if not m:
        raise bad()
    try:
        args = [float(a) for a in m.group(2).split(",") if a]
    except ValueError:
        raise bad() from None
    kind = m.group(1)
    if kind == "fixed" and len(args) == 1 and args[0] >= 1:
        n = int(args[0])
        return lambda rng: n
    if kind == "uniform" and len(args) == 2 and 1 <= args[0] <= args[1]:
        lo, hi = int(args[0]), int(args[1])
        return lambda rng: lo + int(rng.random() * (hi - lo + 1))
    if kind == "normal" and len(args) == 2 and args[0] >= 1 and args[1] >= 0:
        mean, sd = args
        return lambda rng: max(1, int(round(rng.gauss(mean, sd))))
    raise bad()


def _load_synthetic(src: str) -> Corpus:
    from capacity_plugins.corpus_build import synthetic_text, to_jsonl

    spec = _parse_synth_spec(src)
    prompt_len = _length_drawer(spec.get("prompt_tokens", "512"), "prompt_tokens", src)
    out_len = _length_drawer(spec["output_tokens"], "output_tokens", src) if "output_tokens" in spec else None
    try:
        n = int(spec.get("n", "2000"))
        seed = int(spec.get("seed", "0"))
    except ValueError:
        raise UserError(f"{src}: n and seed must be integers") from None
    if not 1 <= n <= 1_000_000:
        raise UserError(f"{src}: n must be between 1 and 1000000")
    lang = spec.get("lang", "en")
    if lang not in ("en", "zh", "mix"):
        raise UserError(f"{src}: lang must be en, zh or mix")
    rng = random.Random(f"synthetic:{seed}")
    records = []
    for i in range(n):
        zh = lang == "zh" or (lang == "mix" and i % 2 == 1)
        rec: dict[str, Any] = {"id": f"s{i}", "prompt": synthetic_text(rng, prompt_len(rng), zh)}
        if out_len is not None:
            rec["max_tokens"] = out_len(rng)
        records.append(rec)
    data = to_jsonl(records)
    samples = _parse_jsonl(data, src, max_tokens_field=True)
    # The canonical content (not the spec text) is hashed, so equal specs written differently match.
    return Corpus(samples, src, hashlib.sha256(data).hexdigest())
