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
from capacity_plugins.client.client import LLMClient
from capacity_plugins.client.users import LLMUser
from capacity_plugins.contracts.redaction import strip_userinfo
from capacity_plugins.rehearsal.source import RequestSource
from helpers.scenarios import write_corpus


class _User(LLMUser):
    pass


@dataclass
class LocalUser:
    env: Environment
    llm: LLMClient  # what register() attached: how to ask, where the record goes
    source: RequestSource  # ... and what to send
    user: LLMUser
    fired: list[dict[str, Any]] = field(default_factory=list)  # every Locust request event, in order

    def call(self) -> Any:
        """One request with the next sample of the corpus; the RequestRecord."""
        return self.user.call(self.next_sample())

    def next_sample(self) -> Any:
        return self.source.next_sample()

    @property
    def records(self) -> Any:
        """The records sink (requests.jsonl)."""
        return self.llm.records

    @property
    def results_dir(self) -> Path:
        return Path(self.env.parsed_options.results_dir)


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
    plugin.register(env)
    source = RequestSource.of(env)
    source.sampler = source.corpus.sampler(sampler, 0, 0, 1)
    local = LocalUser(env, LLMClient.of(env), source, user_class(env))
    env.events.request.add_listener(lambda **kw: local.fired.append(kw))
    return local
