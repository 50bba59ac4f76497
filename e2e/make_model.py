"""Make a tiny Qwen3-shaped model and its tokenizer, locally, with nothing from a hub.

Run with the Axolotl environment's Python (it has torch, transformers and tokenizers)::

    python e2e/make_model.py OUT_DIR

``OUT_DIR`` receives a 2-layer Qwen3 causal LM with random weights (a fixed seed, so the
same bytes every time) saved with ``save_pretrained``, and a byte-level BPE tokenizer
trained here on a small corpus, with pad and end-of-turn tokens and a chat template that
renders an assistant turn's ``reasoning_content`` in a ``<think>`` block, as Qwen3's does.
"""

import sys
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Qwen3's layout, reduced to what a chat needs: every turn between <|im_start|>ROLE and
# <|im_end|>, an assistant's reasoning in <think>…</think> before its answer.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' and message.get('reasoning_content') -%}"
    "{{- '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def corpus() -> list[str]:
    """Text the tokenizer learns its merges from: words and digits like the e2e data's."""
    words = (  # noqa: SIM905 - a sentence reads better than a list of words
        "what is plus minus times the sum of and make add subtract multiply answer is "
        "first then so we get think step carry tens ones result number question"
    ).split()
    lines = [" ".join(words)]
    lines += [f"{a} + {b} = {a + b}. {a} * {b} = {a * b}." for a in range(30) for b in range(30)]
    return lines


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[1:],
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python e2e/make_model.py OUT_DIR")
    main(Path(sys.argv[1]))
