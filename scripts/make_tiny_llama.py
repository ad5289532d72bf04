"""A tiny Llama model with random weights, made offline, for checks against real servers.

    python scripts/make_tiny_llama.py OUT_DIR [--gguf CONVERT_SCRIPT] [--lora N]

Run it with a Python that has torch (CPU), transformers, sentencepiece, protobuf and safetensors;
nothing is downloaded from a model hub. It writes OUT_DIR/hf (a Hugging Face model folder: a
SentencePiece BPE tokenizer of 4000 pieces trained on this Python's own standard library, and a
2-layer Llama of ~0.6 M parameters, float32, seed 0) and, with --gguf pointing at llama.cpp's
`convert_hf_to_gguf.py` (the llama-cpp-python sdist ships it under vendor/llama.cpp), OUT_DIR/tiny.gguf
for llama.cpp's server, and with --lora N the adapters OUT_DIR/lora/lora-1 … lora-N (PEFT's folder
form, rank 8 on q_proj and v_proj, random and distinct) for vLLM's `--lora-modules`. head_dim 32 is
the smallest vLLM's CPU attention accepts.

The special tokens' and the byte tokens' rows of lm_head are zeroed, so end-of-sequence is never
sampled and every answer runs to max_tokens (a known output length on every server).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

VOCAB = 4000


def tokenizer(out: Path) -> None:
    import sentencepiece as spm
    from transformers import AutoTokenizer

    stdlib = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    corpus = out / "corpus.txt"
    with corpus.open("w", encoding="utf-8") as f:
        for path in stdlib:
            f.write(Path(path).read_text(encoding="utf-8", errors="ignore"))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(out / "tokenizer"), vocab_size=VOCAB,
                                   model_type="bpe", byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   character_coverage=1.0, input_sentence_size=200_000, shuffle_input_sentence=True)
    corpus.unlink()
    # Loaded through AutoTokenizer from the folder: building the fast class straight from
    # `vocab_file` (transformers 5) yields a tokenizer.json of 3 tokens that encodes every text to
    # nothing, and vLLM then refuses every prompt as empty.
    (out / "tokenizer_config.json").write_text('{"tokenizer_class": "LlamaTokenizer"}')
    tok = AutoTokenizer.from_pretrained(str(out))
    if len(tok) != VOCAB or not tok("import os").input_ids:
        raise SystemExit(f"make_tiny_llama: the tokenizer came out with {len(tok)} tokens; expected {VOCAB}")
    tok.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    tok.save_pretrained(str(out))


def model(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=32,
                      num_key_value_heads=2, intermediate_size=256, max_position_embeddings=4096,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():  # never end early: no special or byte token is ever the most likely
        m.lm_head.weight[: 3 + 256] = 0.0
    m.save_pretrained(str(out), safe_serialization=True)


LORA_RANK = 8
LORA_TARGETS = ("q_proj", "v_proj")


def adapters(hf: Path, out: Path, n: int) -> None:
    """N LoRA adapters written by hand in PEFT's layout (adapter_config.json and
    adapter_model.safetensors, keys `base_model.model.<module>.lora_A/B.weight`): the layout vLLM
    loads, without PEFT as a dependency. B is not zero, so each adapter really changes the model."""
    import json

    import torch
    from safetensors.torch import save_file

    cfg = json.loads((hf / "config.json").read_text())
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    width = {"q_proj": cfg["num_attention_heads"] * cfg["head_dim"],
             "v_proj": cfg["num_key_value_heads"] * cfg["head_dim"]}
    for k in range(1, n + 1):
        torch.manual_seed(1000 + k)
        folder = out / f"lora-{k}"
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for layer in range(layers):
            for target in LORA_TARGETS:
                key = f"base_model.model.model.layers.{layer}.self_attn.{target}"
                tensors[f"{key}.lora_A.weight"] = torch.randn(LORA_RANK, hidden) * 0.02
                tensors[f"{key}.lora_B.weight"] = torch.randn(width[target], LORA_RANK) * 0.02
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(hf),
            "r": LORA_RANK, "lora_alpha": 2 * LORA_RANK, "lora_dropout": 0.0, "bias": "none",
            "target_modules": list(LORA_TARGETS), "fan_in_fan_out": False, "modules_to_save": None,
            "use_rslora": False, "use_dora": False}, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gguf", metavar="CONVERT_SCRIPT", help="llama.cpp's convert_hf_to_gguf.py: also write tiny.gguf")
    ap.add_argument("--lora", type=int, default=0, metavar="N", help="also write N LoRA adapters under OUT_DIR/lora")
    args = ap.parse_args()
    out = Path(args.out)
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    tokenizer(hf)
    model(hf)
    print(f"model: {hf}", flush=True)
    if args.gguf:
        script = Path(args.gguf)
        env = dict(os.environ, PYTHONPATH=str(script.parent / "gguf-py"))
        subprocess.run([sys.executable, str(script), str(hf), "--outtype", "f32", "--outfile", str(out / "tiny.gguf")],
                       check=True, env=env)
        print(f"gguf: {out / 'tiny.gguf'}", flush=True)
    if args.lora:
        adapters(hf, out / "lora", args.lora)
        print(f"adapters: {out / 'lora'} (lora-1 … lora-{args.lora})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
