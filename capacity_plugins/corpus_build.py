"""Deterministic generators for the shipped built-in corpus, the long-context set and synthetic corpora.

Everything here is generated from templates, topic lists and a seeded `random.Random`: no
network, no model, and the same bytes on every machine and Python version (string seeds go
through SHA-512 in `random.Random`, and only `random()`/`randrange()`-based calls are used), so
`capacity corpus build` can be re-run and audited against the shipped file.

Built-in corpus (`builtin`, `data/builtin.jsonl.gz`), `BUILTIN_COUNT` prompts, half Chinese and
half English, every prompt distinct and none sharing a long prefix with another (each starts
with its own wording or title, so a server's prefix cache cannot serve repeats). Length classes
(estimated tokens: CJK character = 1, other text ≈ chars / 4; see `corpus.estimate_tokens`):

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

Synthetic corpora (`synthetic:prompt_tokens=...`) reuse the same word pools; see
`synthetic_samples`.
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

BUILTIN_COUNT = 6000
BUILTIN_SEED = "capacity-plugins builtin corpus v1"
BUILTIN_FILE = "builtin.jsonl.gz"
LONG_TARGETS = (8_000, 16_000, 32_000)
DATA_DIR = Path(__file__).resolve().parent / "data"

# --------------------------------------------------------------------------------------------
# Word pools. Plain lists (not sets) so iteration order, and therefore output, is fixed.

EN_TOPICS = [
    "Kubernetes autoscaling", "GPU memory fragmentation", "customer churn", "supply chain delays",
    "photosynthesis", "inflation expectations", "database index design", "API rate limiting",
    "solar panel efficiency", "remote team onboarding", "coral reef bleaching", "credit risk models",
    "warehouse robotics", "vaccine cold chains", "urban bike lanes", "battery recycling",
    "open-source licensing", "microservice tracing", "quarterly budgeting", "soil erosion",
    "language model evaluation", "TLS certificate rotation", "retail demand forecasting",
    "hospital triage", "carbon accounting", "mobile app retention", "water desalination",
    "fraud detection", "edge caching", "team retrospectives", "CI pipeline flakiness",
    "noise pollution", "employee wellbeing", "satellite imagery", "market entry strategy",
    "legacy code migration", "data privacy audits", "wind farm maintenance", "school timetabling",
    "event ticket pricing", "prefix caching in inference servers", "load testing methodology",
    "incident postmortems", "cold storage costs", "sleep research", "freight rail scheduling",
    "recipe scaling", "museum digitisation", "insurance claims triage", "airport security queues",
]
EN_NOUNS = [
    "latency", "throughput", "backlog", "budget", "forecast", "queue", "cluster", "dashboard",
    "pipeline", "contract", "survey", "prototype", "inventory", "workflow", "schedule", "report",
    "policy", "sensor", "model", "roadmap", "invoice", "ticket", "release", "dataset", "benchmark",
    "warehouse", "checklist", "proposal", "migration", "outage", "campaign", "audit", "experiment",
]
EN_VERBS = [
    "reduce", "measure", "explain", "compare", "automate", "document", "prioritise", "debug",
    "estimate", "review", "redesign", "monitor", "simplify", "validate", "schedule", "summarise",
]
EN_ADJ = [
    "noisy", "slow", "expensive", "fragile", "critical", "unexpected", "seasonal", "legacy",
    "distributed", "manual", "inconsistent", "overloaded", "promising", "sparse", "steady", "volatile",
]
EN_PEOPLE = [
    "Alice", "Bongani", "Chen Wei", "Dmitri", "Elena", "Farah", "Gustavo", "Hiroshi", "Ingrid",
    "Jamal", "Kavya", "Lukas", "Mei", "Nadia", "Oscar", "Priya", "Quentin", "Rosa", "Sven", "Tariq",
]
EN_CITIES = [
    "Lisbon", "Nairobi", "Osaka", "Toronto", "Lyon", "Austin", "Pune", "Gdansk", "Recife",
    "Auckland", "Tallinn", "Cebu", "Leeds", "Hanoi", "Denver", "Porto", "Seville", "Adelaide",
]
EN_AUDIENCES = [
    "a new intern", "a CFO", "a ten-year-old", "a senior engineer", "a product manager",
    "a hospital administrator", "a school teacher", "an investor", "a customer", "a journalist",
]
EN_TOOLS = [
    "Python", "PostgreSQL", "Excel", "Kubernetes", "Terraform", "Grafana", "pandas", "Rust",
    "Go", "Bash", "React", "Spark", "Redis", "Nginx", "Git", "Prometheus", "SQLite", "Java",
]
EN_FORMATS = [
    "three bullet points", "one paragraph", "a table", "a numbered list", "two sentences",
    "a short e-mail", "a haiku", "a checklist", "plain language", "a JSON object",
]

ZH_TOPICS = [
    "推理服务扩容", "显存碎片", "客户流失", "供应链延迟", "光合作用", "通胀预期", "数据库索引设计",
    "接口限流", "光伏效率", "远程团队入职", "珊瑚白化", "信用风险模型", "仓储机器人", "疫苗冷链",
    "城市自行车道", "电池回收", "开源许可证", "微服务链路追踪", "季度预算", "水土流失", "大模型评测",
    "证书轮换", "零售需求预测", "医院分诊", "碳排放核算", "应用留存", "海水淡化", "反欺诈",
    "边缘缓存", "团队复盘", "持续集成不稳定", "噪声污染", "员工健康", "卫星遥感", "市场进入策略",
    "遗留系统迁移", "数据隐私审计", "风电运维", "排课系统", "票务定价", "前缀缓存", "压测方法",
    "故障复盘", "冷库成本", "睡眠研究", "铁路货运调度", "菜谱换算", "博物馆数字化", "保险理赔",
    "机场安检排队",
]
ZH_NOUNS = [
    "延迟", "吞吐量", "积压", "预算", "预测", "队列", "集群", "看板", "流水线", "合同", "问卷", "原型",
    "库存", "流程", "排期", "报告", "制度", "传感器", "模型", "路线图", "发票", "工单", "版本",
    "数据集", "基准测试", "仓库", "清单", "方案", "迁移", "故障", "活动", "审计", "实验",
]
ZH_VERBS = [
    "降低", "衡量", "解释", "比较", "自动化", "记录", "排序", "排查", "估算", "评审", "重新设计",
    "监控", "简化", "验证", "安排", "总结",
]
ZH_ADJ = [
    "不稳定的", "缓慢的", "昂贵的", "脆弱的", "关键的", "意外的", "季节性的", "老旧的", "分布式的",
    "手工的", "不一致的", "过载的", "有前景的", "稀疏的", "平稳的", "波动的",
]
ZH_PEOPLE = [
    "王磊", "李娜", "张伟", "刘洋", "陈静", "杨帆", "赵敏", "黄强", "周婷", "吴昊", "徐丽", "孙浩",
    "马超", "朱琳", "胡军", "郭鹏", "何欣", "高远", "林峰", "罗佳",
]
ZH_CITIES = [
    "北京", "上海", "深圳", "杭州", "成都", "武汉", "西安", "南京", "苏州", "重庆", "长沙", "厦门",
    "青岛", "天津", "合肥", "昆明", "大连", "郑州",
]
ZH_AUDIENCES = [
    "刚入职的实习生", "财务总监", "十岁的小朋友", "资深工程师", "产品经理", "医院管理者", "中学老师",
    "投资人", "普通用户", "记者",
]
ZH_FORMATS = [
    "三个要点", "一段话", "一张表格", "编号列表", "两句话", "一封简短邮件", "一首小诗", "检查清单",
    "通俗的语言", "JSON 对象",
]
# Common characters for synthetic Chinese text (enough variety that no two prompts match).
ZH_CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说"
    "产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点"
    "从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原"
    "又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革"
    "位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强"
)

# --------------------------------------------------------------------------------------------
# Sentence makers. Each returns one sentence built from the pools.


def _pick(rng: random.Random, seq: list[str] | str) -> Any:
    return seq[int(rng.random() * len(seq))]


def _num(rng: random.Random, lo: int, hi: int) -> int:
    return lo + int(rng.random() * (hi - lo + 1))


def _en_sentence(rng: random.Random, topic: str) -> str:
    p, n, v, a = _pick(rng, EN_PEOPLE), _pick(rng, EN_NOUNS), _pick(rng, EN_VERBS), _pick(rng, EN_ADJ)
    c, n2 = _pick(rng, EN_CITIES), _pick(rng, EN_NOUNS)
    templates = [
        f"{p} noted that the {a} {n} in {c} grew by {_num(rng, 2, 95)}% over {_num(rng, 2, 18)} weeks.",
        f"The team working on {topic} tried to {v} the {n} before the {n2} review.",
        f"In {c}, the {n} for {topic} was {a} for most of the quarter, according to {p}.",
        f"One open question is whether we should {v} the {n} or first {_pick(rng, EN_VERBS)} the {n2}.",
        f"Measurements from {_num(rng, 3, 400)} sites show the {n} staying under {_num(rng, 10, 900)} units.",
        f"{p} proposed a pilot to {v} the {a} {n} with a budget of {_num(rng, 5, 500)} thousand dollars.",
        f"Because the {n2} was {a}, the {n} slipped by {_num(rng, 1, 30)} days.",
        f"A survey of {_num(rng, 20, 5000)} users in {c} ranked {topic} {_num(rng, 1, 9)} of 10 in importance.",
        f"The previous {n} ignored {topic}, which made the {n2} look better than it was.",
        f"{p} and {_pick(rng, EN_PEOPLE)} disagree about how to {v} the {n}; the data so far is {a}.",
        f"After the change, median {n} fell from {_num(rng, 50, 900)} to {_num(rng, 5, 400)} ms in {c}.",
        f"Nobody owns the {a} {n2} yet, so the {n} for {topic} keeps growing.",
    ]
    return _pick(rng, templates)


def _zh_sentence(rng: random.Random, topic: str) -> str:
    p, n, v, a = _pick(rng, ZH_PEOPLE), _pick(rng, ZH_NOUNS), _pick(rng, ZH_VERBS), _pick(rng, ZH_ADJ)
    c, n2 = _pick(rng, ZH_CITIES), _pick(rng, ZH_NOUNS)
    templates = [
        f"{p}指出，{c}{a}{n}在{_num(rng, 2, 18)}周内上升了{_num(rng, 2, 95)}%。",
        f"负责{topic}的团队希望在{n2}评审之前先{v}{n}。",
        f"据{p}介绍，{c}的{topic}{n}在本季度大部分时间都是{a}。",
        f"目前悬而未决的问题是：应该先{v}{n}，还是先{_pick(rng, ZH_VERBS)}{n2}。",
        f"来自{_num(rng, 3, 400)}个站点的数据显示，{n}一直低于{_num(rng, 10, 900)}个单位。",
        f"{p}提议用{_num(rng, 5, 500)}万元预算做一个试点，{v}{a}{n}。",
        f"由于{n2}是{a}，{n}推迟了{_num(rng, 1, 30)}天。",
        f"在{c}对{_num(rng, 20, 5000)}名用户的调查中，{topic}的重要性排在第{_num(rng, 1, 9)}位。",
        f"上一版{n}忽略了{topic}，导致{n2}看起来比实际更好。",
        f"{p}和{_pick(rng, ZH_PEOPLE)}在如何{v}{n}上意见不一，目前的数据仍然{a[:-1]}。",
        f"改动之后，{c}的{n}中位数从{_num(rng, 50, 900)}毫秒降到了{_num(rng, 5, 400)}毫秒。",
        f"{a}{n2}目前没有负责人，所以{topic}的{n}还在不断增加。",
    ]
    return _pick(rng, templates)


def _paragraph(rng: random.Random, zh: bool, topic: str, sentences: int) -> str:
    make = _zh_sentence if zh else _en_sentence
    return ("" if zh else " ").join(make(rng, topic) for _ in range(sentences))


def _est_tokens(text: str) -> int:
    from capacity_plugins.corpus import estimate_tokens

    return estimate_tokens(text)


def _document(rng: random.Random, zh: bool, topic: str, target_tokens: int) -> str:
    """Titled multi-paragraph document of about `target_tokens` estimated tokens."""
    # Headings make long documents look like reports and vary the structure between prompts.
    if zh:
        title = f"《{_pick(rng, ZH_CITIES)}{topic}{_pick(rng, ['调研报告', '周报', '复盘纪要', '方案评审', '会议记录'])}（第{_num(rng, 1, 999)}期）》"
        headings = ["背景", "现状", "数据", "问题", "原因分析", "方案", "风险", "下一步", "附录"]
    else:
        title = f"{topic.capitalize()} — {_pick(rng, ['field report', 'weekly notes', 'postmortem', 'design review', 'meeting minutes'])} #{_num(rng, 1, 999)} ({_pick(rng, EN_CITIES)})"
        headings = ["Background", "Current state", "Data", "Problems", "Root causes", "Options", "Risks", "Next steps", "Appendix"]
    parts = [title]
    used = _est_tokens(title)
    h = 0
    while used < target_tokens:
        if h < len(headings) and rng.random() < 0.35:
            parts.append(f"## {headings[h]}")
            h += 1
        para = _paragraph(rng, zh, topic, _num(rng, 2, 6))
        parts.append(para)
        used += _est_tokens(para) + 2
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------
# Prompt kinds


def _short(rng: random.Random, zh: bool) -> str:
    if zh:
        t, n, v = _pick(rng, ZH_TOPICS), _pick(rng, ZH_NOUNS), _pick(rng, ZH_VERBS)
        choices = [
            f"{t}里的{n}应该怎么{v}？",
            f"请用{_pick(rng, ZH_FORMATS)}向{_pick(rng, ZH_AUDIENCES)}解释{t}。",
            f"{t}和{_pick(rng, ZH_TOPICS)}有什么区别？举{_num(rng, 2, 5)}个例子。",
            f"我们在{_pick(rng, ZH_CITIES)}做{t}，{n}一直{_pick(rng, ZH_ADJ)[:-1]}，可能是什么原因？",
            f"给我{_num(rng, 3, 12)}条关于{t}的建议，每条不超过{_num(rng, 10, 40)}个字。",
            f"如果预算只有{_num(rng, 1, 300)}万元，{t}应该优先{v}什么？",
            f"写一个{_pick(rng, EN_TOOLS)}函数来{v}{n}，并说明时间复杂度。",
            f"{_pick(rng, ZH_PEOPLE)}说{t}不重要，你怎么看？",
            f"把“{_pick(rng, ZH_ADJ)}{n}”翻译成英文，并给出{_num(rng, 2, 4)}个例句。",
            f"第{_num(rng, 1, 99)}周的{n}复盘会上，关于{t}应该问哪些问题？",
        ]
    else:
        t, n, v = _pick(rng, EN_TOPICS), _pick(rng, EN_NOUNS), _pick(rng, EN_VERBS)
        choices = [
            f"How do I {v} the {n} in {_pick(rng, EN_TOOLS)} when working on {t}?",
            f"Explain {t} to {_pick(rng, EN_AUDIENCES)} in {_pick(rng, EN_FORMATS)}.",
            f"What is the difference between {t} and {_pick(rng, EN_TOPICS)}? Give {_num(rng, 2, 5)} examples.",
            f"Our {n} in {_pick(rng, EN_CITIES)} has been {_pick(rng, EN_ADJ)} since we started on {t}. Why might that be?",
            f"Give me {_num(rng, 3, 12)} tips about {t}, each under {_num(rng, 8, 30)} words.",
            f"With only ${_num(rng, 1, 300)}k, what should a {t} project {v} first?",
            f"Write a {_pick(rng, EN_TOOLS)} function that can {v} a {n}, and state its complexity.",
            f"{_pick(rng, EN_PEOPLE)} says {t} is overrated. Argue both sides briefly.",
            f"Translate '{_pick(rng, EN_ADJ)} {n}' into Chinese and give {_num(rng, 2, 4)} example sentences.",
            f"Which questions should we ask about {t} at the week-{_num(rng, 1, 52)} {n} review?",
        ]
    return _pick(rng, choices)


def _code_snippet(rng: random.Random) -> str:
    fn = f"{_pick(rng, EN_VERBS)}_{_pick(rng, EN_NOUNS)}"
    arg = _pick(rng, EN_NOUNS)
    lines = [f"def {fn}({arg}s, limit={_num(rng, 2, 500)}):", "    out = []"]
    for _ in range(_num(rng, 2, 9)):
        field = _pick(rng, EN_NOUNS)
        lines.append(f"    for item in {arg}s:")
        lines.append(f"        if item.get('{field}', 0) > limit * {_num(rng, 1, 9)}:")
        lines.append(f"            out.append(item['{field}'] / {_num(rng, 2, 60)})")
    lines.append("    return sorted(out)[:limit]")
    return "\n".join(lines)


def _medium(rng: random.Random, zh: bool) -> str:
    kind = int(rng.random() * 3)
    if kind == 2:
        code = _code_snippet(rng)
        if zh:
            return f"下面这段 Python 代码{_pick(rng, ['运行很慢', '有时结果不对', '可读性很差', '缺少测试'])}，请{_pick(rng, ['找出问题并改写', '加上类型注解和注释', '写出单元测试', '解释它在做什么'])}：\n\n```python\n{code}\n```"
        return f"This Python function {_pick(rng, ['is slow', 'sometimes returns wrong results', 'is hard to read', 'has no tests'])}. Please {_pick(rng, ['find the bug and rewrite it', 'add type hints and comments', 'write unit tests for it', 'explain what it does'])}:\n\n```python\n{code}\n```"
    if zh:
        topic = _pick(rng, ZH_TOPICS)
        body = _paragraph(rng, True, topic, _num(rng, 3, 12))
        if kind == 0:
            return f"{_pick(rng, ZH_PEOPLE)}发来一段关于{topic}的说明：\n{body}\n请用{_pick(rng, ZH_FORMATS)}概括要点，并指出一个风险。"
        return f"帮我把下面这封邮件改得更{_pick(rng, ['礼貌', '简洁', '正式', '有说服力'])}一些，收件人是{_pick(rng, ZH_AUDIENCES)}：\n\n{_pick(rng, ZH_PEOPLE)}您好，\n{body}\n谢谢！"
    topic = _pick(rng, EN_TOPICS)
    body = _paragraph(rng, False, topic, _num(rng, 2, 8))
    if kind == 0:
        return f"{_pick(rng, EN_PEOPLE)} sent this note about {topic}:\n{body}\nSummarise it as {_pick(rng, EN_FORMATS)} and name one risk."
    return f"Rewrite this e-mail to {_pick(rng, EN_AUDIENCES)} so it is more {_pick(rng, ['polite', 'concise', 'formal', 'persuasive'])}:\n\nHi {_pick(rng, EN_PEOPLE)},\n{body}\nThanks!"


def _with_task(rng: random.Random, zh: bool, doc: str) -> str:
    if zh:
        task = _pick(rng, [
            f"请用{_pick(rng, ZH_FORMATS)}总结上面的材料。",
            "根据材料，列出所有提到的数字并说明含义。",
            f"材料中{_pick(rng, ZH_PEOPLE)}的观点是否有数据支持？请逐条分析。",
            "请找出材料中相互矛盾的地方。",
            f"假设你是{_pick(rng, ZH_AUDIENCES)}，读完后最关心哪三个问题？",
        ])
    else:
        task = _pick(rng, [
            f"Summarise the document above as {_pick(rng, EN_FORMATS)}.",
            "List every number mentioned above and explain what it measures.",
            f"Is {_pick(rng, EN_PEOPLE)}'s position supported by the data? Go point by point.",
            "Find statements in the document that contradict each other.",
            f"You are {_pick(rng, EN_AUDIENCES)}. Which three questions would you ask after reading this?",
        ])
    # Task first or last: either way the prompt still starts with text unique to it.
    if rng.random() < 0.6:
        return f"{doc}\n\n{task}"
    task = task.replace("上面", "下面").replace("above", "below")
    return f"{task}\n\n{doc}"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> int:
    return int(math.exp(math.log(lo) + rng.random() * (math.log(hi) - math.log(lo))))


def _long(rng: random.Random, zh: bool, lo: int, hi: int) -> str:
    topic = _pick(rng, ZH_TOPICS if zh else EN_TOPICS)
    return _with_task(rng, zh, _document(rng, zh, topic, _log_uniform(rng, lo, hi)))


def _multi_turn(rng: random.Random, zh: bool) -> list[dict[str, str]]:
    first = _short(rng, zh) if rng.random() < 0.6 else _medium(rng, zh)
    topic = _pick(rng, ZH_TOPICS if zh else EN_TOPICS)
    answer = _paragraph(rng, zh, topic, _num(rng, 2, 6))
    if zh:
        follow = _pick(rng, ["能再具体一点吗？", "请举一个反例。", f"如果换成{_pick(rng, ZH_CITIES)}呢？",
                             "把上面的回答压缩成一句话。", f"第{_num(rng, 1, 5)}点我没看懂，再解释一下。"])
    else:
        follow = _pick(rng, ["Can you be more specific?", "Give a counter-example.",
                             f"What changes if we do this in {_pick(rng, EN_CITIES)}?",
                             "Compress that answer into one sentence.",
                             f"I did not follow point {_num(rng, 1, 5)}; explain it again."])
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


def to_jsonl(records: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


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
            topic = _pick(rng, ZH_TOPICS if zh else EN_TOPICS)
            doc = _with_task(rng, zh, _document(rng, zh, topic, target - 60))
            out.append({"id": f"long{target // 1000}k-{i}-{'zh' if zh else 'en'}", "prompt": doc})
    return out


# --------------------------------------------------------------------------------------------
# Synthetic text of a given estimated length (vLLM-bench "random" / genai-perf synthetic style).

_EN_WORDS = sorted({w.lower() for words in (EN_NOUNS, EN_VERBS, EN_ADJ, EN_CITIES) for w in words}
                   | {w.lower() for t in EN_TOPICS for w in t.split()})


def synthetic_text(rng: random.Random, tokens: int, zh: bool) -> str:
    """Random text of exactly `tokens` estimated tokens (CJK: one char each; else 4 chars each)."""
    tokens = max(1, tokens)
    if zh:
        return "".join(_pick(rng, ZH_CHARS) for _ in range(tokens))
    chars = tokens * 4
    words: list[str] = []
    n = 0
    while n < chars:
        w = _pick(rng, _EN_WORDS)
        words.append(w)
        n += len(w) + 1
    text = " ".join(words)[:chars]
    # Trailing space would be stripped by some clients; end on a letter.
    return text[:-1] + "x" if text.endswith(" ") else text
