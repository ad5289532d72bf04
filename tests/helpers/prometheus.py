"""Prometheus exposition text as values: parse once, look samples up by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def parse(text: str) -> Samples:
    """{(sample name, sorted (label, value) pairs): value} with prometheus_client's own parser."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, /, **labels: str) -> float | None:
    """The first sample called `name` whose labels include `labels`; None when there is none."""
    for (sample, have), v in samples.items():
        if sample == name and all(dict(have).get(k) == want for k, want in labels.items()):
            return v
    return None


def metric(samples: Samples, name: str, /, **labels: str) -> float:
    """Like value(), but a missing sample is a KeyError naming it."""
    v = value(samples, name, **labels)
    if v is None:
        raise KeyError(f"{name} {labels} not in the exposition")
    return v
