"""The shipped built-in corpus and the long-context set: their deterministic generators and build.

Everything here is generated from templates, the word pools (`words`) and a seeded
`random.Random`: no network, no model, and the same bytes on every machine and Python version
(string seeds go through SHA-512 in `random.Random`, and only `random()`-based calls are used), so
`capacity corpus build` can be re-run and audited against the shipped file.

Built-in corpus (`builtin`, `data/builtin.jsonl.gz`), `BUILTIN_COUNT` prompts, half Chinese and
half English, every prompt distinct and none sharing a long prefix with another (each starts
with its own wording or title, so a server's prefix cache cannot serve repeats). Length classes
(estimated tokens: CJK character = 1, other text ≈ chars / 4; see `text.estimate_tokens`):

=============  ======  ====================  ==============================================
class          share   est. tokens           what
=============  ======  ====================  ==============================================
short          35 %    ≈ 8 – 80              one chat question or request
medium         27 %    ≈ 100 – 400           instruction + a paragraph, e-mail, code snippet
long           22 %    ≈ 400 – 1500          document + task (summarise, extract, answer)
very long       6 %    ≈ 1500 – 4000         multi-section report + task
multi-turn     10 %    ≈ 40 – 600            `messages`: user / assistant / user
=============  ======  ====================  ==============================================

No sample carries `max_tokens`: the run's `--max-tokens` decides output length.

Long-context set (`builtin:long`, generated on demand): for each target of ≈ 8k, 16k and 32k
estimated tokens, two English and two Chinese documents with a question at the end. It is a
boundary set (context-length limits, prefill time), not a replay corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from capacity_plugins.corpus.readers import to_jsonl
from capacity_plugins.corpus.text import estimate_tokens
from capacity_plugins.corpus.words import (
    EN_ADJ,
    EN_AUDIENCES,
    EN_CITIES,
    EN_FORMATS,
    EN_NOUNS,
    EN_PEOPLE,
    EN_TOOLS,
    EN_TOPICS,
    EN_VERBS,
    ZH_ADJ,
    ZH_AUDIENCES,
    ZH_CITIES,
    ZH_FORMATS,
    ZH_NOUNS,
    ZH_PEOPLE,
    ZH_TOPICS,
    ZH_VERBS,
    num,
    pick,
)

BUILTIN_COUNT = 6000
BUILTIN_SEED = "capacity-plugins builtin corpus v1"
BUILTIN_FILE = "builtin.jsonl.gz"
LONG_TARGETS = (8_000, 16_000, 32_000)
DATA_DIR = Path(__file__).resolve().parent.parent / "data"  # capacity_plugins/data, shipped as package data

# --------------------------------------------------------------------------------------------
# Sentence makers. Each returns one sentence built from the pools.


def _en_sentence(rng: random.Random, topic: str) -> str:
    p, n, v, a = pick(rng, EN_PEOPLE), pick(rng, EN_NOUNS), pick(rng, EN_VERBS), pick(rng, EN_ADJ)
    c, n2 = pick(rng, EN_CITIES), pick(rng, EN_NOUNS)
    templates = [
        f"{p} noted that the {a} {n} in {c} grew by {num(rng, 2, 95)}% over {num(rng, 2, 18)} weeks.",
        f"The team working on {topic} tried to {v} the {n} before the {n2} review.",
        f"In {c}, the {n} for {topic} was {a} for most of the quarter, according to {p}.",
        f"One open question is whether we should {v} the {n} or first {pick(rng, EN_VERBS)} the {n2}.",
        f"Measurements from {num(rng, 3, 400)} sites show the {n} staying under {num(rng, 10, 900)} units.",
        f"{p} proposed a pilot to {v} the {a} {n} with a budget of {num(rng, 5, 500)} thousand dollars.",
        f"Because the {n2} was {a}, the {n} slipped by {num(rng, 1, 30)} days.",
        f"A survey of {num(rng, 20, 5000)} users in {c} ranked {topic} {num(rng, 1, 9)} of 10 in importance.",
        f"The previous {n} ignored {topic}, which made the {n2} look better than it was.",
        f"{p} and {pick(rng, EN_PEOPLE)} disagree about how to {v} the {n}; the data so far is {a}.",
        f"After the change, median {n} fell from {num(rng, 50, 900)} to {num(rng, 5, 400)} ms in {c}.",
        f"Nobody owns the {a} {n2} yet, so the {n} for {topic} keeps growing.",
    ]
    return pick(rng, templates)


def _zh_sentence(rng: random.Random, topic: str) -> str:
    p, n, v, a = pick(rng, ZH_PEOPLE), pick(rng, ZH_NOUNS), pick(rng, ZH_VERBS), pick(rng, ZH_ADJ)
    c, n2 = pick(rng, ZH_CITIES), pick(rng, ZH_NOUNS)
    templates = [
        f"{p}指出，{c}{a}{n}在{num(rng, 2, 18)}周内上升了{num(rng, 2, 95)}%。",
        f"负责{topic}的团队希望在{n2}评审之前先{v}{n}。",
        f"据{p}介绍，{c}的{topic}{n}在本季度大部分时间都是{a}。",
        f"目前悬而未决的问题是：应该先{v}{n}，还是先{pick(rng, ZH_VERBS)}{n2}。",
        f"来自{num(rng, 3, 400)}个站点的数据显示，{n}一直低于{num(rng, 10, 900)}个单位。",
        f"{p}提议用{num(rng, 5, 500)}万元预算做一个试点，{v}{a}{n}。",
        f"由于{n2}是{a}，{n}推迟了{num(rng, 1, 30)}天。",
        f"在{c}对{num(rng, 20, 5000)}名用户的调查中，{topic}的重要性排在第{num(rng, 1, 9)}位。",
        f"上一版{n}忽略了{topic}，导致{n2}看起来比实际更好。",
        f"{p}和{pick(rng, ZH_PEOPLE)}在如何{v}{n}上意见不一，目前的数据仍然{a[:-1]}。",
        f"改动之后，{c}的{n}中位数从{num(rng, 50, 900)}毫秒降到了{num(rng, 5, 400)}毫秒。",
        f"{a}{n2}目前没有负责人，所以{topic}的{n}还在不断增加。",
    ]
    return pick(rng, templates)


def _paragraph(rng: random.Random, zh: bool, topic: str, sentences: int) -> str:
    make = _zh_sentence if zh else _en_sentence
    return ("" if zh else " ").join(make(rng, topic) for _ in range(sentences))


def _document(rng: random.Random, zh: bool, topic: str, target_tokens: int) -> str:
    """Titled multi-paragraph document of about `target_tokens` estimated tokens."""
    # Headings make long documents look like reports and vary the structure between prompts.
    if zh:
        title = f"《{pick(rng, ZH_CITIES)}{topic}{pick(rng, ['调研报告', '周报', '复盘纪要', '方案评审', '会议记录'])}（第{num(rng, 1, 999)}期）》"
        headings = ["背景", "现状", "数据", "问题", "原因分析", "方案", "风险", "下一步", "附录"]
    else:
        title = f"{topic.capitalize()} — {pick(rng, ['field report', 'weekly notes', 'postmortem', 'design review', 'meeting minutes'])} #{num(rng, 1, 999)} ({pick(rng, EN_CITIES)})"
        headings = ["Background", "Current state", "Data", "Problems", "Root causes", "Options", "Risks", "Next steps", "Appendix"]
    parts = [title]
    used = estimate_tokens(title)
    h = 0
    while used < target_tokens:
        if h < len(headings) and rng.random() < 0.35:
            parts.append(f"## {headings[h]}")
            h += 1
        para = _paragraph(rng, zh, topic, num(rng, 2, 6))
        parts.append(para)
        used += estimate_tokens(para) + 2
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------
# Prompt kinds


def _short(rng: random.Random, zh: bool) -> str:
    if zh:
        t, n, v = pick(rng, ZH_TOPICS), pick(rng, ZH_NOUNS), pick(rng, ZH_VERBS)
        choices = [
            f"{t}里的{n}应该怎么{v}？",
            f"请用{pick(rng, ZH_FORMATS)}向{pick(rng, ZH_AUDIENCES)}解释{t}。",
            f"{t}和{pick(rng, ZH_TOPICS)}有什么区别？举{num(rng, 2, 5)}个例子。",
            f"我们在{pick(rng, ZH_CITIES)}做{t}，{n}一直{pick(rng, ZH_ADJ)[:-1]}，可能是什么原因？",
            f"给我{num(rng, 3, 12)}条关于{t}的建议，每条不超过{num(rng, 10, 40)}个字。",
            f"如果预算只有{num(rng, 1, 300)}万元，{t}应该优先{v}什么？",
            f"写一个{pick(rng, EN_TOOLS)}函数来{v}{n}，并说明时间复杂度。",
            f"{pick(rng, ZH_PEOPLE)}说{t}不重要，你怎么看？",
            f"把“{pick(rng, ZH_ADJ)}{n}”翻译成英文，并给出{num(rng, 2, 4)}个例句。",
            f"第{num(rng, 1, 99)}周的{n}复盘会上，关于{t}应该问哪些问题？",
        ]
    else:
        t, n, v = pick(rng, EN_TOPICS), pick(rng, EN_NOUNS), pick(rng, EN_VERBS)
        choices = [
            f"How do I {v} the {n} in {pick(rng, EN_TOOLS)} when working on {t}?",
            f"Explain {t} to {pick(rng, EN_AUDIENCES)} in {pick(rng, EN_FORMATS)}.",
            f"What is the difference between {t} and {pick(rng, EN_TOPICS)}? Give {num(rng, 2, 5)} examples.",
            f"Our {n} in {pick(rng, EN_CITIES)} has been {pick(rng, EN_ADJ)} since we started on {t}. Why might that be?",
            f"Give me {num(rng, 3, 12)} tips about {t}, each under {num(rng, 8, 30)} words.",
            f"With only ${num(rng, 1, 300)}k, what should a {t} project {v} first?",
            f"Write a {pick(rng, EN_TOOLS)} function that can {v} a {n}, and state its complexity.",
            f"{pick(rng, EN_PEOPLE)} says {t} is overrated. Argue both sides briefly.",
            f"Translate '{pick(rng, EN_ADJ)} {n}' into Chinese and give {num(rng, 2, 4)} example sentences.",
            f"Which questions should we ask about {t} at the week-{num(rng, 1, 52)} {n} review?",
        ]
    return pick(rng, choices)


def _code_snippet(rng: random.Random) -> str:
    fn = f"{pick(rng, EN_VERBS)}_{pick(rng, EN_NOUNS)}"
    arg = pick(rng, EN_NOUNS)
    lines = [f"def {fn}({arg}s, limit={num(rng, 2, 500)}):", "    out = []"]
    for _ in range(num(rng, 2, 9)):
        field = pick(rng, EN_NOUNS)
        lines.append(f"    for item in {arg}s:")
        lines.append(f"        if item.get('{field}', 0) > limit * {num(rng, 1, 9)}:")
        lines.append(f"            out.append(item['{field}'] / {num(rng, 2, 60)})")
    lines.append("    return sorted(out)[:limit]")
    return "\n".join(lines)


def _medium(rng: random.Random, zh: bool) -> str:
    kind = int(rng.random() * 3)
    if kind == 2:
        code = _code_snippet(rng)
        if zh:
            return f"下面这段 Python 代码{pick(rng, ['运行很慢', '有时结果不对', '可读性很差', '缺少测试'])}，请{pick(rng, ['找出问题并改写', '加上类型注解和注释', '写出单元测试', '解释它在做什么'])}：\n\n```python\n{code}\n```"
        return f"This Python function {pick(rng, ['is slow', 'sometimes returns wrong results', 'is hard to read', 'has no tests'])}. Please {pick(rng, ['find the bug and rewrite it', 'add type hints and comments', 'write unit tests for it', 'explain what it does'])}:\n\n```python\n{code}\n```"
    if zh:
        topic = pick(rng, ZH_TOPICS)
        body = _paragraph(rng, True, topic, num(rng, 3, 12))
        if kind == 0:
            return f"{pick(rng, ZH_PEOPLE)}发来一段关于{topic}的说明：\n{body}\n请用{pick(rng, ZH_FORMATS)}概括要点，并指出一个风险。"
        return f"帮我把下面这封邮件改得更{pick(rng, ['礼貌', '简洁', '正式', '有说服力'])}一些，收件人是{pick(rng, ZH_AUDIENCES)}：\n\n{pick(rng, ZH_PEOPLE)}您好，\n{body}\n谢谢！"
    topic = pick(rng, EN_TOPICS)
    body = _paragraph(rng, False, topic, num(rng, 2, 8))
    if kind == 0:
        return f"{pick(rng, EN_PEOPLE)} sent this note about {topic}:\n{body}\nSummarise it as {pick(rng, EN_FORMATS)} and name one risk."
    return f"Rewrite this e-mail to {pick(rng, EN_AUDIENCES)} so it is more {pick(rng, ['polite', 'concise', 'formal', 'persuasive'])}:\n\nHi {pick(rng, EN_PEOPLE)},\n{body}\nThanks!"


def _with_task(rng: random.Random, zh: bool, doc: str) -> str:
    if zh:
        task = pick(rng, [
            f"请用{pick(rng, ZH_FORMATS)}总结上面的材料。",
            "根据材料，列出所有提到的数字并说明含义。",
            f"材料中{pick(rng, ZH_PEOPLE)}的观点是否有数据支持？请逐条分析。",
            "请找出材料中相互矛盾的地方。",
            f"假设你是{pick(rng, ZH_AUDIENCES)}，读完后最关心哪三个问题？",
        ])
    else:
        task = pick(rng, [
            f"Summarise the document above as {pick(rng, EN_FORMATS)}.",
            "List every number mentioned above and explain what it measures.",
            f"Is {pick(rng, EN_PEOPLE)}'s position supported by the data? Go point by point.",
            "Find statements in the document that contradict each other.",
            f"You are {pick(rng, EN_AUDIENCES)}. Which three questions would you ask after reading this?",
        ])
    # Task first or last: either way the prompt still starts with text unique to it.
    if rng.random() < 0.6:
        return f"{doc}\n\n{task}"
    task = task.replace("上面", "下面").replace("above", "below")
    return f"{task}\n\n{doc}"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> int:
    return int(math.exp(math.log(lo) + rng.random() * (math.log(hi) - math.log(lo))))


def _long(rng: random.Random, zh: bool, lo: int, hi: int) -> str:
    topic = pick(rng, ZH_TOPICS if zh else EN_TOPICS)
    return _with_task(rng, zh, _document(rng, zh, topic, _log_uniform(rng, lo, hi)))


def _multi_turn(rng: random.Random, zh: bool) -> list[dict[str, str]]:
    first = _short(rng, zh) if rng.random() < 0.6 else _medium(rng, zh)
    topic = pick(rng, ZH_TOPICS if zh else EN_TOPICS)
    answer = _paragraph(rng, zh, topic, num(rng, 2, 6))
    if zh:
        follow = pick(rng, ["能再具体一点吗？", "请举一个反例。", f"如果换成{pick(rng, ZH_CITIES)}呢？",
                             "把上面的回答压缩成一句话。", f"第{num(rng, 1, 5)}点我没看懂，再解释一下。"])
    else:
        follow = pick(rng, ["Can you be more specific?", "Give a counter-example.",
                             f"What changes if we do this in {pick(rng, EN_CITIES)}?",
                             "Compress that answer into one sentence.",
                             f"I did not follow point {num(rng, 1, 5)}; explain it again."])
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": follow},
    ]


_KINDS: list[tuple[str, float, Callable[[random.Random, bool], Any]]] = [
    ("short", 0.35, _short),
    ("medium", 0.27, _medium),
    ("long", 0.22, lambda r, zh: _long(r, zh, 400, 1500)),
    ("very_long", 0.06, lambda r, zh: _long(r, zh, 1500, 4000)),
    ("multi_turn", 0.10, _multi_turn),
]


def builtin_records(count: int = BUILTIN_COUNT, seed: str = BUILTIN_SEED) -> list[dict[str, Any]]:
    """The built-in corpus as JSONL-ready dicts, in file order (deterministic)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    cum = []
    acc = 0.0
    for name, share, _ in _KINDS:
        acc += share
        cum.append((acc, name))
    makers = {name: fn for name, _, fn in _KINDS}
    while len(out) < count:
        zh = len(out) % 2 == 0
        u = rng.random() * acc
        kind = next(name for edge, name in cum if u < edge)
        body = makers[kind](rng, zh)
        key = orjson.dumps(body).decode()
        if key in seen:
            continue
        seen.add(key)
        rec: dict[str, Any] = {"id": f"b{len(out):05d}-{'zh' if zh else 'en'}-{kind}"}
        rec["messages" if kind == "multi_turn" else "prompt"] = body
        out.append(rec)
    return out


def gzip_bytes(data: bytes) -> bytes:
    """Gzip without a timestamp or file name, so the same content gives the same file."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def build_builtin(out_dir: Path = DATA_DIR) -> tuple[Path, str, int]:
    """Write `builtin.jsonl.gz`; returns (path, sha256 of the uncompressed JSONL, count)."""
    records = builtin_records()
    data = to_jsonl(records)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / BUILTIN_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip_bytes(data))
    tmp.replace(path)
    return path, hashlib.sha256(data).hexdigest(), len(records)


def long_records() -> list[dict[str, Any]]:
    """The long-context boundary set: 2 English + 2 Chinese documents per target size."""
    out = []
    for target in LONG_TARGETS:
        for i, zh in enumerate((False, True, False, True)):
            rng = random.Random(f"capacity-plugins long v1 {target} {i}")
            topic = pick(rng, ZH_TOPICS if zh else EN_TOPICS)
            doc = _with_task(rng, zh, _document(rng, zh, topic, target - 60))
            out.append({"id": f"long{target // 1000}k-{i}-{'zh' if zh else 'en'}", "prompt": doc})
    return out

