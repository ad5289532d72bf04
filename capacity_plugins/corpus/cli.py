"""`capacity corpus stats SOURCE` and `capacity corpus build`.

``stats`` loads a corpus (a file, ``builtin``, ``builtin:long`` or ``synthetic:...``), prints its
size, duplicates, shared long prefixes, length percentiles and language mix — and the images a
corpus names: per prompt, resolutions, estimated image tokens (corpus/stats.py) — (``--json`` for a
machine-readable object), and exits 2 when it has fewer than ``--min-distinct`` distinct prompts
(the stats are still printed first, so you can see what is wrong). ``build`` regenerates the
shipped built-in corpus deterministically and prints its SHA-256 (of the uncompressed JSONL,
the same hash `load_corpus("builtin").sha256` reports).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from capacity_plugins.corpus.builtin import DATA_DIR, build_builtin
from capacity_plugins.corpus.loader import DEFAULT_MIN_DISTINCT, load_corpus
from capacity_plugins.errors import EXIT_BAD_INPUT, CommandParser, UserError


def _parser() -> CommandParser:
    p = CommandParser(prog="capacity corpus", description="corpus tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stats", help="describe a corpus and check it has enough distinct prompts")
    st.add_argument("source", help="PATH (.jsonl/.jsonl.gz/.csv/.json/.parquet), builtin, builtin:long or synthetic:...")
    st.add_argument("--min-distinct", type=int, default=DEFAULT_MIN_DISTINCT, metavar="N",
                    help=f"fail (exit 2) below N distinct prompts (default {DEFAULT_MIN_DISTINCT})")
    st.add_argument("--json", action="store_true", help="print the stats as one JSON object")
    b = sub.add_parser("build", help="regenerate the shipped built-in corpus (deterministic)")
    b.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="output folder (default: the package's data folder)")
    return p


def _human(st: dict[str, Any]) -> str:
    def pct(d: dict[str, Any]) -> str:
        return "  ".join(f"{k} {v}" for k, v in d.items())

    sp = st["shared_long_prefix"]
    lines = [
        f"source       {st['source']}",
        f"sha256       {st['sha256']}",
        f"prompts      {st['count']}  (distinct {st['distinct']}, duplicates {st['duplicates']}, "
        f"as messages {st['messages_samples']})",
        f"shared long prefixes (≥{sp['prefix_tokens_est']} est. tokens)  groups {sp['groups']}, "
        f"prompts {sp['prompts']}, largest group {sp['largest_group']}",
        f"chars        {pct(st['prompt_chars'])}",
        f"tokens (est) {pct(st['prompt_tokens_est'])}",
        f"languages    zh {st['languages']['zh']:.1%}  en/other {st['languages']['en']:.1%}",
        f"max_tokens   set on {st['max_tokens']['samples_with']} samples"
        + (f" (p50 {st['max_tokens']['p50']})" if "p50" in st["max_tokens"] else ""),
    ]
    im = st.get("images")
    if im:
        rule = im["tile_rule"]
        sizes = ", ".join(f"{k} ×{v}" for k, v in im["resolutions"].items())
        lines += [
            f"images       {im['total']} on {im['prompts_with']} prompts; per prompt {pct(im['per_prompt'])}",
            f"resolutions  {sizes}" + (f", {im['other_resolutions']} of other sizes" if im["other_resolutions"] else ""),
            f"image tokens (est) per prompt {pct(im['image_tokens_est'])}  ({rule['tile_px']}-px tiles × "
            f"{rule['tokens_per_tile']} tokens, at most {rule['max_tiles']} + a thumbnail: the simulator's rule)",
        ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "build":
        path, sha, n = build_builtin(args.out or DATA_DIR)
        print(f"wrote {path}: {n} prompts, sha256 {sha} (uncompressed JSONL)")
        return 0
    if args.min_distinct < 0:
        raise UserError("--min-distinct must be ≥ 0")
    corpus = load_corpus(args.source, min_distinct=0)
    st = corpus.stats()
    st["min_distinct"] = args.min_distinct
    st["ok"] = corpus.exempt_min_distinct or st["distinct"] >= args.min_distinct
    print(json.dumps(st, ensure_ascii=False, indent=1) if args.json else _human(st))
    if not st["ok"]:
        print(
            f"capacity corpus: error: {args.source}: only {st['distinct']} distinct prompts, fewer than "
            f"--min-distinct {args.min_distinct} (repeats hit the server's prefix cache); add prompts "
            f"or lower the limit with --min-distinct N",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return 0
