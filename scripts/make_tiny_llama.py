"""A tiny Llama model with random weights, made offline, for checks against real servers.

    python scripts/make_tiny_llama.py OUT_DIR [--gguf CONVERT_SCRIPT]

Run it with a Python that has torch (CPU), transformers, sentencepiece, protobuf and safetensors;
nothing is downloaded from a model hub. It writes OUT_DIR/hf (a Hugging Face model folder: a
SentencePiece BPE tokenizer of 4000 pieces trained on this Python's own standard library, and a
2-layer Llama of ~0.6 M parameters, float32, seed 0) and, with --gguf pointing at llama.cpp's
`convert_hf_to_gguf.py` (the llama-cpp-python sdist ships it under vendor/llama.cpp), OUT_DIR/tiny.gguf
for llama.cpp's server. head_dim 32 is the smallest vLLM's CPU attention accepts.

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
    from transformers import LlamaTokenizerFast

    stdlib = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    corpus = out / "corpus.txt"
    with corpus.open("w", encoding="utf-8") as f:
        for path in stdlib:
            f.write(Path(path).read_text(encoding="utf-8", errors="ignore"))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(out / "tokenizer"), vocab_size=VOCAB,
                                   model_type="bpe", byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   character_coverage=1.0, input_sentence_size=200_000, shuffle_input_sentence=True)
    corpus.unlink()
    tok = LlamaTokenizerFast(vocab_file=str(out / "tokenizer.model"))
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gguf", metavar="CONVERT_SCRIPT", help="llama.cpp's convert_hf_to_gguf.py: also write tiny.gguf")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
