"""An LLMUser in this process: its own Locust Environment and Events, the plugin registered on it.

For tests that call `user.call(sample)` directly (no spawning, no runner loop); the Environment's
events are its own, so nothing leaks into Locust's global hooks or into another test.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locust.env import Environment
from locust.event import Events

from capacity_plugins import plugin
from capacity_plugins.client.context import RunContext
from capacity_plugins.client.users import LLMUser
from capacity_plugins.contracts.redaction import strip_userinfo
from helpers.scenarios import write_corpus


class _User(LLMUser):
    pass


@dataclass
class LocalUser:
    env: Environment
    ctx: RunContext
    user: LLMUser
    fired: list[dict[str, Any]] = field(default_factory=list)  # every Locust request event, in order

    def call(self) -> Any:
        """One request with the next sample of the corpus; the RequestRecord."""
        return self.user.call(self.ctx.next_sample())


def local_user(url: str, tmp_path: Path, *, sampler: str = "sequential", corpus_size: int = 20,
               **options: Any) -> LocalUser:
    """An LLMUser against `url` with the plugin's options (a corpus of `corpus_size` prompts under
    tmp_path unless `corpus=` is given; results under tmp_path/out)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    corpus = tmp_path / "c.jsonl"
    if "corpus" not in options and not corpus.exists():
        write_corpus(corpus, corpus_size)
    ns = argparse.Namespace(dialect="openai-chat", corpus=str(corpus), min_distinct=1,
                            results_dir=str(tmp_path / "out"))
    for k, v in options.items():
        setattr(ns, k, v)
    # the user's class gets the URL without user:password, as the plugin leaves environment.host
    user_class = type("U", (_User,), {"host": strip_userinfo(url)})
    env = Environment(user_classes=[user_class], events=Events(), host=url, parsed_options=ns)
    env.create_local_runner()
    ctx = plugin.register(env)
    ctx.sampler = ctx.corpus.sampler(sampler, 0, 0, 1)
    local = LocalUser(env, ctx, user_class(env))
    env.events.request.add_listener(lambda **kw: local.fired.append(kw))
    return local
