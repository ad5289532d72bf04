"""A tiny Llama model with random weights, made offline, for checks against real servers.

    python scripts/make_tiny_llama.py OUT_DIR [--gguf CONVERT_SCRIPT] [--lora N] [--vlm]

Run it with a Python that has torch (CPU), transformers, sentencepiece, protobuf and safetensors;
nothing is downloaded from a model hub. It writes OUT_DIR/hf (a Hugging Face model folder: a
SentencePiece BPE tokenizer of 4000 pieces trained on this Python's own standard library, and a
2-layer Llama of ~0.6 M parameters, float32, seed 0) and, with --gguf pointing at llama.cpp's
`convert_hf_to_gguf.py` (the llama-cpp-python sdist ships it under vendor/llama.cpp), OUT_DIR/tiny.gguf
for llama.cpp's server, and with --lora N the adapters OUT_DIR/lora/lora-1 … lora-N (PEFT's folder
form, rank 8 on q_proj and v_proj, random and distinct) for vLLM's `--lora-modules`, and with --vlm a
tiny LLaVA, OUT_DIR/vlm (256 image tokens an image), for vLLM's image inputs (Pillow needed too).
head_dim 32 is the smallest vLLM's CPU attention accepts.

The special tokens' and the byte tokens' rows of lm_head are zeroed, so end-of-sequence is never
sampled and every answer runs to max_tokens (a known output length on every server).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
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
                # large enough that every adapter's greedy answer differs from the base model's
                tensors[f"{key}.lora_A.weight"] = torch.randn(LORA_RANK, hidden) * 0.2
                tensors[f"{key}.lora_B.weight"] = torch.randn(width[target], LORA_RANK) * 0.2
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(hf),
            "r": LORA_RANK, "lora_alpha": 2 * LORA_RANK, "lora_dropout": 0.0, "bias": "none",
            "target_modules": list(LORA_TARGETS), "fan_in_fan_out": False, "modules_to_save": None,
            "use_rslora": False, "use_dora": False}, indent=1))


VLM_IMAGE_PX = 224
VLM_PATCH_PX = 14  # 16 × 16 patches: 256 image tokens an image (the CLS token left out, LLaVA's "default")


def vlm(hf: Path, out: Path) -> None:
    """A tiny LLaVA with random weights: the tiny Llama's tokenizer with an `<image>` token, a 2-layer
    Llama of the same shape, and a 2-layer CLIP vision tower over 224-px images (16 × 16 patches of
    14 px: 256 image tokens an image), for vLLM's image inputs. Images are resized and cropped to
    224 px, so the image tokens do not grow with the image's size (LLaVA 1.5's rule)."""
    import torch
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tok = AutoTokenizer.from_pretrained(str(hf))
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_id = tok.convert_tokens_to_ids("<image>")
    text = LlamaConfig.from_pretrained(str(hf))
    text.vocab_size = len(tok)
    vision = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                              image_size=VLM_IMAGE_PX, patch_size=VLM_PATCH_PX, projection_dim=64)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_id=image_id, projector_hidden_act="gelu",
                      vision_feature_layer=-2, vision_feature_select_strategy="default",
                      image_seq_length=(VLM_IMAGE_PX // VLM_PATCH_PX) ** 2)
    torch.manual_seed(0)
    m = LlavaForConditionalGeneration(cfg).to(torch.float32)
    with torch.no_grad():  # as the text model: never end early, never emit the image token
        m.lm_head.weight[: 3 + 256] = 0.0
        m.lm_head.weight[image_id] = 0.0
    m.save_pretrained(str(out), safe_serialization=True)
    # transformers 5 writes the vision tower's weights without the `vision_model.` level that the
    # llava-1.5 checkpoints (and vLLM's loader) have: put it back.
    from safetensors.torch import load_file, save_file

    weights = out / "model.safetensors"
    tensors = {re.sub(r"^vision_tower\.(?!vision_model\.)", "vision_tower.vision_model.", k): v
               for k, v in load_file(str(weights)).items()}
    save_file(tensors, str(weights), metadata={"format": "pt"})
    images = CLIPImageProcessor(size={"shortest_edge": VLM_IMAGE_PX},
                                crop_size={"height": VLM_IMAGE_PX, "width": VLM_IMAGE_PX})
    LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=VLM_PATCH_PX, image_token="<image>",
                   vision_feature_select_strategy="default", num_additional_image_tokens=1,
                   chat_template=tok.chat_template).save_pretrained(str(out))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gguf", metavar="CONVERT_SCRIPT", help="llama.cpp's convert_hf_to_gguf.py: also write tiny.gguf")
    ap.add_argument("--lora", type=int, default=0, metavar="N", help="also write N LoRA adapters under OUT_DIR/lora")
    ap.add_argument("--vlm", action="store_true", help="also write a tiny LLaVA (image inputs) to OUT_DIR/vlm")
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
    if args.vlm:
        vlm(hf, out / "vlm")
        print(f"vlm: {out / 'vlm'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
