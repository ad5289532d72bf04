"""What every LLMUser of a process shares to make one request and hand its record on.

One `LLMClient` per Locust process, built by `plugin.register()` from the run's options and
attached as `environment.capacity_client` (`LLMClient.of(environment)`):

- how to ask: the dialect and its request parameters, the headers (the API key or the target
  URL's credentials), the tokenizer, the run's secrets (scrubbed from every error kept);
- what the users learn together: the connection backoff (client/backoff.py), which output-token
  count is exact for this server (client/tokens.py), stream reads per step;
- where a finished record goes: the records sink (requests.jsonl, or shipped to the master) and
  the live LLM statistics.

`configure()` applies new options in place — a worker learns the master's at each test start, the
web UI form may change them between tests — and users keep their reference to this object. What
the users send next and when is the rehearsal's (rehearsal/source.py `RequestSource`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from capacity_plugins.client.backoff import Backoff
from capacity_plugins.client.tokens import TokenCountEvidence
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.redaction import Secrets, basic_auth
from capacity_plugins.corpus.images import synthetic_images
from capacity_plugins.dialects import Dialect, RequestParams, get_dialect
from capacity_plugins.errors import UserError
from capacity_plugins.sinks.stats import LLMStats

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from capacity_plugins.sinks.records import RecordsSink

ATTRIBUTE = "capacity_client"  # where register() attaches it on the Locust environment


class LLMClient:
    def __init__(self, options: LLMOptions, *, target_url: str | None = None,
                 records: RecordsSink | None = None, stats: LLMStats | None = None) -> None:
        # The target as given, credentials included (environment.host shows it without them).
        self.target_url = target_url
        self.records = records  # None without a runner: nothing is kept
        self.stats = stats if stats is not None else LLMStats()
        # Connection failures pause the whole process (client/backoff.py).
        self.backoff = Backoff()
        # Which output-token count is exact for this server, when it reports none (client/tokens.py).
        self.token_evidence = TokenCountEvidence()
        # step → [stream reads that brought output, reads that brought more than one output event]
        self.read_counts: dict[int, list[int]] = {}
        self.tokenizer: Tokenizer | None = None  # the --tokenizer, loaded once per process
        self.tokenizer_path: str | None = None
        # Why users killed mid-request were stopped, when it is not the test's end (a worker
        # whose master fell silent: swarm/deadman.py); their `cancelled` records say it.
        self.cancel_reason: str | None = None
        self.configure(options)

    @classmethod
    def of(cls, environment: Any) -> LLMClient:
        found = getattr(environment, ATTRIBUTE, None)
        if not isinstance(found, cls):
            raise RuntimeError("capacity plugin not registered on this environment (capacity_plugins.install)")
        return found

    def attach(self, environment: Any) -> None:
        setattr(environment, ATTRIBUTE, self)

    def configure(self, options: LLMOptions, *, target_url: str | None = None) -> None:
        """Apply (new) options in place. UserError when the API key's variable is unset or a
        tokenizer file is bad."""
        self.options = options
        self.dialect: Dialect = get_dialect(options.dialect, options.triton)
        self.params = RequestParams(
            model=options.model,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            stream=options.stream,
            include_usage=options.usage,
            ignore_eos=options.ignore_eos,
            batch_size=options.batch_size,
            images=options.images,
            image_size=options.image_size,
        )
        self.request_name = options.dialect
        synthetic_images(options.images, options.image_size)  # made now, not in the first request
        if options.tokenizer != self.tokenizer_path:  # a worker reconfigures with the same path: keep it
            self.tokenizer = load_tokenizer(options.tokenizer) if options.tokenizer else None
            self.tokenizer_path = options.tokenizer
        if target_url is not None:
            self.target_url = target_url
        key = options.api_key()
        basic = basic_auth(self.target_url)
        # The API key wins over credentials in the URL (docs/secrets.md). Kept out of any repr.
        self._auth_headers = {"Authorization": f"Bearer {key}" if key else str(basic)} if key or basic else {}
        # Every secret value of the run: scrubbed from whatever it writes (records, meta, reports).
        self.secrets: Secrets = options.secrets(self.target_url)

    def request_headers(self, call_headers: dict[str, str]) -> dict[str, str]:
        """Headers for one call: dialect's, then user extras, then auth; identity encoding
        because the body is read raw, line by line (a gzip-ing proxy would break parsing)."""
        headers = dict(call_headers)
        headers.update(self.options.headers)
        headers.update(self._auth_headers)
        headers["Accept-Encoding"] = "identity"
        return headers

    def count_tokens(self, text: str) -> int:
        """Tokens of generated text by the local tokenizer (no BOS/EOS added)."""
        assert self.tokenizer is not None
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count_reads(self, step: int, reads: int, backlog_reads: int) -> None:
        counts = self.read_counts.get(step)
        if counts is None:
            counts = self.read_counts[step] = [0, 0]
        counts[0] += reads
        counts[1] += backlog_reads

    def __repr__(self) -> str:  # never the headers: a repr can land in a log line
        return f"LLMClient(dialect={self.options.dialect!r}, model={self.options.model!r})"


def load_tokenizer(path: str) -> Tokenizer:
    """A Hugging Face tokenizer.json; UserError naming the file when it is missing or unreadable."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--tokenizer: {path}: no such file")
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(p))
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON / unknown models
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else e.__class__.__name__
        raise UserError(f"--tokenizer: {path}: not a Hugging Face tokenizer.json ({first})") from None
