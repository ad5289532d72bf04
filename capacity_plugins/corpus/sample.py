"""One prompt of a corpus, as every source produces it and every dialect reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capacity_plugins.contracts.images import ImagePart
from capacity_plugins.corpus.text import estimate_tokens, messages_text


@dataclass(frozen=True)
class Sample:
    """One prompt. Exactly one of `prompt` / `messages` is set; `images` go with the (last) user
    turn, in a dialect that can send images (contracts/dialects.py `IMAGE_DIALECTS`)."""

    id: str
    prompt: str | None
    messages: list[dict[str, Any]] | None
    max_tokens: int | None
    prompt_chars: int
    prompt_tokens_est: int
    images: tuple[ImagePart, ...] = ()

    @property
    def identity(self) -> str:
        """What makes two prompts the same one: the text and the images it names."""
        if not self.images:
            return self.text
        return "\0".join([self.text, *(i.ref or i.size or "" for i in self.images)])

    @property
    def text(self) -> str:
        """The prompt, or the messages' contents joined by blank lines (for prompt-only dialects)."""
        if self.prompt is not None:
            return self.prompt
        return messages_text(self.messages)

    def as_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.prompt}]

    @classmethod
    def make(cls, id: str, *, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
             max_tokens: int | None = None, images: tuple[ImagePart, ...] = ()) -> Sample:
        text = prompt if prompt is not None else messages_text(messages)
        return cls(id=id, prompt=prompt, messages=messages, max_tokens=max_tokens,
                   prompt_chars=len(text), prompt_tokens_est=estimate_tokens(text), images=images)
