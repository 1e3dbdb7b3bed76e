"""A tiny llama-architecture GGUF with RANDOM weights, for proving the serving path with a real llama.cpp server.

The weights are random normal numbers, not trained: the text the model generates is meaningless. It exists only
so a real `llama-server` can load a real GGUF and answer real OpenAI-style requests (model listing, chat
completions, streaming, token usage) in milliseconds on a CPU; nothing about its output is worth asserting
beyond its shape.

`write_tiny_model(vocab, out)` takes any vocabulary-only llama GGUF (llama.cpp ships them under `models/`, e.g.
`ggml-vocab-llama-spm.gguf`), copies its `tokenizer.ggml.*` keys, adds a small chat template of its own and writes
the layers of a `ModelShape`: by default `TINY`, 2 layers, embedding 64, 4 attention and 4 KV heads, FFN 256,
context 512. 2-D weights are F16 with the output projection tied to the token embedding (no `output.weight`); the
norms are F32 ones. With a 32,000-token vocabulary that is about 5 MB.

`PREFILL_HEAVY` is the serving benchmark's model: context 4,096 and four times the width over 4 layers, so that
prefilling a 1,000-token prompt costs clearly more than decoding a few tokens (about 17 MB).

`write_tiny_lora(shape, out)` writes a random LoRA adapter for the model of `shape`: a GGUF of `general.type`
"adapter", `adapter.type` "lora", with a `.lora_a`/`.lora_b` pair for the query, value and FFN-up projections of
every block. llama.cpp adds `scale * alpha / rank * B @ A` to each such weight; the pairs are drawn large enough
(about a dozen times the base weights' spread) that greedy answers with the adapter applied differ from those without.

Invariants: the output is a function of the vocabulary file alone (fixed seed, keys written in a fixed order, no
timestamps, no dependence on hash seeds), so every run writes the same bytes; the adapter's bytes are a function of
its shape, rank and seed. A file appears under its final name only when complete (written beside it, then renamed).

CLI: `python -m llmaz_dev.tinymodel --vocab <vocab.gguf> --out <file.gguf> [--shape tiny|prefill-heavy]`, or
`python -m llmaz_dev.tinymodel --lora --out <adapter.gguf> [--shape ...]` for the adapter.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

ARCHITECTURE = "llama"
NAME = "llmaz-tiny-random-llama"
DESCRIPTION = (
    "Random weights, not trained: generated text is meaningless. A test fixture that proves the llama.cpp serving "
    "path (loading, chat completions, streaming, usage), written by llmaz_dev.tinymodel."
)


@dataclass(frozen=True, slots=True)
class ModelShape:
    block_count: int
    embedding_length: int
    feed_forward_length: int
    context_length: int
    head_count: int = 4
    head_count_kv: int = 4


TINY = ModelShape(block_count=2, embedding_length=64, feed_forward_length=256, context_length=512)
PREFILL_HEAVY = ModelShape(block_count=2, embedding_length=128, feed_forward_length=512, context_length=4096)
SHAPES = {"tiny": TINY, "prefill-heavy": PREFILL_HEAVY}
RMS_EPSILON = 1e-5
ROPE_FREQ_BASE = 10000.0
WEIGHT_STD = 0.02
SEED = 20261123
MAX_BYTES = 50 * 1024 * 1024
LORA_NAME = "llmaz-tiny-random-lora"
LORA_RANK = 8
LORA_SEED = 20261126
# Each of A and B has this spread, so B @ A has about sqrt(rank) * 0.3 * 0.3 = 0.25: about 12 times the base weights'.
LORA_STD = 0.3
LORA_TENSORS = ("attn_q", "attn_v", "ffn_up")

# The vocabulary files carry no template, and without one llama-server falls back to chatml; a template of our own
# proves the server reads it from the GGUF. Plain "Role: text" lines, because the SPM vocabulary has no chat tokens.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{- 'System: ' -}}"
    "{%- elif message['role'] == 'user' -%}{{- 'User: ' -}}"
    "{%- else -%}{{- 'Assistant: ' -}}{%- endif -%}"
    "{{- message['content'] + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"
)

_TOKENIZER_PREFIX = "tokenizer.ggml."
_TOKENS_KEY = "tokenizer.ggml.tokens"


def write_tiny_model(vocab: Path, out: Path, shape: ModelShape = TINY) -> Path:
    """Write the random model of `shape` for the vocabulary GGUF `vocab` to `out`; returns `out`."""
    tokenizer = _tokenizer_fields(vocab)
    n_vocab = len(tokenizer[_TOKENS_KEY][0])

    def check(written: Path) -> None:
        size = written.stat().st_size
        if size > MAX_BYTES:
            raise ValueError(f"{vocab}: the tiny model would be {size} bytes (limit {MAX_BYTES}): vocabulary too large")

    return _write_gguf(
        out, lambda writer: _add_metadata(writer, shape, n_vocab, tokenizer), _tensors(shape, n_vocab), check
    )


def write_tiny_lora(base_shape: ModelShape, out: Path, seed: int = LORA_SEED, rank: int = LORA_RANK) -> Path:
    """Write a random LoRA adapter for the tiny model of `base_shape` to `out`; returns `out`.

    Shapes as llama.cpp checks them (numpy order, (rows, columns)): for a base weight of (out, in), `lora_a` is
    (rank, in) and `lora_b` is (out, rank). `adapter.lora.alpha` equals the rank, so a request's scale is the
    factor B @ A is added with.
    """

    def metadata(writer: gguf.GGUFWriter) -> None:
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_name(LORA_NAME)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))

    return _write_gguf(out, metadata, _lora_tensors(base_shape, seed, rank))


def _write_gguf(
    out: Path,
    metadata: Callable[[gguf.GGUFWriter], None],
    tensors: list[tuple[str, npt.NDArray[Any]]],
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Write a GGUF beside `out`, check it, then rename it to `out`: the file appears only when complete."""
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        writer = gguf.GGUFWriter(tmp, ARCHITECTURE)
        try:
            metadata(writer)
            for name, tensor in tensors:
                writer.add_tensor(name, tensor)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
        if check is not None:
            check(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _lora_tensors(shape: ModelShape, seed: int, rank: int) -> list[tuple[str, npt.NDArray[Any]]]:
    rng = np.random.default_rng(seed)
    embd, ffn = shape.embedding_length, shape.feed_forward_length
    kv = embd // shape.head_count * shape.head_count_kv
    outputs = {"attn_q": embd, "attn_v": kv, "ffn_up": ffn}

    def drawn(rows: int, cols: int) -> npt.NDArray[np.float32]:
        return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(LORA_STD)

    tensors: list[tuple[str, npt.NDArray[Any]]] = []
    for layer in range(shape.block_count):
        for tensor in LORA_TENSORS:
            base = f"blk.{layer}.{tensor}.weight"
            tensors += [(f"{base}.lora_a", drawn(rank, embd)), (f"{base}.lora_b", drawn(outputs[tensor], rank))]
    return tensors


def _tokenizer_fields(vocab: Path) -> dict[str, tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """The vocabulary's `tokenizer.ggml.*` keys as (value, type, array item type), sorted by key."""
    reader = gguf.GGUFReader(vocab)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch is None or arch.contents() != ARCHITECTURE:
        raise ValueError(f"{vocab}: not a {ARCHITECTURE} GGUF (general.architecture is {arch and arch.contents()!r})")
    fields: dict[str, tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]] = {}
    for key in sorted(reader.fields):
        if not key.startswith(_TOKENIZER_PREFIX):
            continue
        field = reader.fields[key]
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY and len(field.types) != 2:
            raise ValueError(f"{vocab}: {key} is a nested array, which a tokenizer key never is")
        sub_type = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        fields[key] = (field.contents(), vtype, sub_type)
    if _TOKENS_KEY not in fields:
        raise ValueError(f"{vocab}: no {_TOKENS_KEY}: not a vocabulary GGUF")
    return fields


def _add_metadata(
    writer: gguf.GGUFWriter,
    shape: ModelShape,
    n_vocab: int,
    tokenizer: dict[str, tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]],
) -> None:
    writer.add_name(NAME)
    writer.add_description(DESCRIPTION)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_block_count(shape.block_count)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.embedding_length)
    writer.add_feed_forward_length(shape.feed_forward_length)
    writer.add_head_count(shape.head_count)
    writer.add_head_count_kv(shape.head_count_kv)
    writer.add_layer_norm_rms_eps(RMS_EPSILON)
    writer.add_rope_dimension_count(shape.embedding_length // shape.head_count)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_vocab_size(n_vocab)
    for key, (value, vtype, sub_type) in tokenizer.items():
        writer.add_key_value(key, value, vtype, sub_type)
    writer.add_chat_template(CHAT_TEMPLATE)


def _tensors(shape: ModelShape, n_vocab: int) -> list[tuple[str, npt.NDArray[Any]]]:
    """Every tensor in file order; numpy shapes are (out, in). Drawn in this order from one seeded generator."""
    rng = np.random.default_rng(SEED)
    embd, ffn = shape.embedding_length, shape.feed_forward_length
    kv = embd // shape.head_count * shape.head_count_kv

    def weight(rows: int, cols: int) -> npt.NDArray[np.float16]:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(WEIGHT_STD)).astype(np.float16)

    def norm() -> npt.NDArray[np.float32]:
        return np.ones(embd, dtype=np.float32)

    tensors: list[tuple[str, npt.NDArray[Any]]] = [("token_embd.weight", weight(n_vocab, embd))]
    for layer in range(shape.block_count):
        block = f"blk.{layer}"
        tensors += [
            (f"{block}.attn_norm.weight", norm()),
            (f"{block}.attn_q.weight", weight(embd, embd)),
            (f"{block}.attn_k.weight", weight(kv, embd)),
            (f"{block}.attn_v.weight", weight(kv, embd)),
            (f"{block}.attn_output.weight", weight(embd, embd)),
            (f"{block}.ffn_norm.weight", norm()),
            (f"{block}.ffn_gate.weight", weight(ffn, embd)),
            (f"{block}.ffn_up.weight", weight(ffn, embd)),
            (f"{block}.ffn_down.weight", weight(embd, ffn)),
        ]
    tensors.append(("output_norm.weight", norm()))
    return tensors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m llmaz_dev.tinymodel",
        description="Write a tiny llama GGUF with random weights (meaningless output) to test serving.",
    )
    parser.add_argument("--vocab", type=Path, help="a vocabulary-only llama GGUF to take the tokenizer from")
    parser.add_argument("--out", type=Path, required=True, help="the GGUF file to write")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="the model's size (default tiny)")
    parser.add_argument(
        "--lora", action="store_true", help="write a random LoRA adapter for the model of --shape instead"
    )
    args = parser.parse_args(argv)
    if args.lora:
        print(write_tiny_lora(SHAPES[args.shape], args.out))
    elif args.vocab is None:
        parser.error("--vocab is required to write the model (only --lora writes without one)")
    else:
        print(write_tiny_model(args.vocab, args.out, SHAPES[args.shape]))


if __name__ == "__main__":
    main()
