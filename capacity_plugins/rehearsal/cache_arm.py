"""A cache probe (kinds/cache_probe.py) on a generator process: which prompts the running step's arm sends.

The distinct arm takes the process's corpus shard as any step does (`RequestSource.sampler`). A
cache-arm step carries its `ArmSpec` (`Step.arm_spec`), so a worker needs no scenario of its own:
`CacheArmSource` builds the arm from the process's corpus and shard the first time a step asks
(corpus/cache_arms.py; the same prefix and pool on every process) and hands out its prompts while
a cache-arm step runs; at any other time it answers None and the user takes the corpus's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from capacity_plugins.corpus.cache_arms import ArmSpec, RepeatArm, SharedPrefixArm, build_arm

if TYPE_CHECKING:
    from capacity_plugins.corpus import Sample
    from capacity_plugins.rehearsal.source import RequestSource
    from capacity_plugins.rehearsal.steps import StepTimeline


class CacheArmSource:
    """`RequestSource.cache_arm`: the next prompt of the running step's cache arm, or None."""

    def __init__(self, source: RequestSource, timeline: Callable[[], StepTimeline]) -> None:
        self.source = source  # its corpus and this process's shard
        self.timeline = timeline  # the source's current timeline (a web-UI restart replaces it)
        self._key: tuple[Any, ...] | None = None
        self._arm: SharedPrefixArm | RepeatArm | None = None

    def prepare(self, spec: dict[str, Any]) -> SharedPrefixArm | RepeatArm | None:
        """The arm for this spec on this process's corpus and shard (built once, then kept, so its
        tails continue from level to level as the distinct arm's prompts do)."""
        source = self.source
        if source.corpus is None:
            return None
        key = (source.corpus.sha256, source.worker_index, source.worker_count, tuple(sorted(spec.items())))
        if key != self._key:
            self._arm = build_arm(source.corpus, ArmSpec.from_message(spec), source.worker_index,
                                  source.worker_count)
            self._key = key
        return self._arm

    def __call__(self, now_unix: float) -> Sample | None:
        timeline = self.timeline()
        index, _ = timeline.lookup(now_unix)
        step = timeline.get(index) if index is not None else None
        if step is None or step.arm_spec is None:
            return None
        arm = self.prepare(step.arm_spec)
        return arm.next() if arm is not None else None
