"""The word pools and the two seeded draws the generated corpora (builtin, long, synthetic) use.

Plain lists (not sets) so iteration order, and therefore output, is fixed; `pick` and `num` use
only `random()`, whose sequence for a given seed is the same on every Python version
(`random.Random` hashes string seeds with SHA-512), so a rebuild gives the same bytes.
"""

from __future__ import annotations

import random
from typing import Any

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


def pick(rng: random.Random, seq: list[str] | str) -> Any:
    """One element of `seq`."""
    return seq[int(rng.random() * len(seq))]


def num(rng: random.Random, lo: int, hi: int) -> int:
    """An integer in [lo, hi]."""
    return lo + int(rng.random() * (hi - lo + 1))
