"""The tiny random-weight GGUF: reproducible to the byte, and shaped as llama.cpp's llama loader expects.

The vocabulary is a synthetic SPM GGUF written here, so these tests need no llama.cpp build.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import jinja2
import numpy as np
import pytest

from llmaz_dev import tinymodel

_WORDS = ["the", "a", "model", "serve", "token", "random", "llama", "hello", "world", "test", "is", "of", "and"]
_PIECES = ["\u2581", *(chr(c) for c in range(ord("a"), ord("z") + 1)), *(f"\u2581{w}" for w in _WORDS)]
_N_TOKENS = 3 + 256 + len(_PIECES)


def _synthetic_vocab(path: Path, arch: str = "llama") -> Path:
    """A vocabulary-only SPM GGUF: control tokens, the 256 byte tokens, and some word pieces (299 tokens)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    tokens += _PIECES
    types += [gguf.TokenType.NORMAL] * len(_PIECES)
    scores = [0.0] * 259 + [-float(i) for i in range(len(_PIECES))]
    writer = gguf.GGUFWriter(path, arch)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types([int(t) for t in types])
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _synthetic_vocab(tmp_path_factory.mktemp("vocab") / "vocab.gguf")


@pytest.fixture(scope="module")
def model(vocab: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tinymodel.write_tiny_model(vocab, tmp_path_factory.mktemp("model") / "tiny.gguf")


def _generate_in_subprocess(vocab: Path, out: Path, hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    subprocess.run(
        [sys.executable, "-m", "llmaz_dev.tinymodel", "--vocab", str(vocab), "--out", str(out)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out.read_bytes()


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    assert field is not None, f"{key} missing"
    return field.contents()


def test_two_processes_with_different_hash_seeds_write_identical_bytes(vocab: Path, tmp_path: Path) -> None:
    first = _generate_in_subprocess(vocab, tmp_path / "one.gguf", "1")
    second = _generate_in_subprocess(vocab, tmp_path / "two.gguf", "4242")

    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()
    assert not list(tmp_path.glob(".*.tmp")), "the temporary file must be renamed or removed"


def test_metadata_describes_a_small_llama_with_random_weights(model: Path) -> None:
    reader = gguf.GGUFReader(model)

    assert _field(reader, "general.architecture") == "llama"
    assert "random" in _field(reader, "general.name")
    assert "meaningless" in _field(reader, "general.description")
    assert _field(reader, "general.file_type") == int(gguf.LlamaFileType.MOSTLY_F16)
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.context_length") == 512
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.feed_forward_length") == 256
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.attention.head_count_kv") == 4
    assert _field(reader, "llama.rope.dimension_count") == 16
    assert _field(reader, "llama.vocab_size") == _N_TOKENS
    assert _field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert _field(reader, "llama.rope.freq_base") == pytest.approx(10000.0)


def test_tokenizer_keys_are_copied_from_the_vocabulary(vocab: Path, model: Path) -> None:
    source, copy = gguf.GGUFReader(vocab), gguf.GGUFReader(model)
    keys = sorted(k for k in source.fields if k.startswith("tokenizer.ggml."))

    assert keys == sorted(k for k in copy.fields if k.startswith("tokenizer.ggml."))
    assert {
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type",
    } <= set(keys)
    for key in keys:
        assert copy.fields[key].types == source.fields[key].types, key
        assert _field(copy, key) == _field(source, key), key


def test_tensors_have_the_llama_names_shapes_and_types(model: Path) -> None:
    reader = gguf.GGUFReader(model)
    # GGUF stores dimensions innermost first; reversed they are numpy's (out, in).
    tensors = {t.name: (tuple(int(d) for d in reversed(t.shape)), t.tensor_type) for t in reader.tensors}
    f16, f32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
    expected = {"token_embd.weight": ((_N_TOKENS, 64), f16), "output_norm.weight": ((64,), f32)}
    for n in range(2):
        expected |= {
            f"blk.{n}.attn_norm.weight": ((64,), f32),
            f"blk.{n}.attn_q.weight": ((64, 64), f16),
            f"blk.{n}.attn_k.weight": ((64, 64), f16),
            f"blk.{n}.attn_v.weight": ((64, 64), f16),
            f"blk.{n}.attn_output.weight": ((64, 64), f16),
            f"blk.{n}.ffn_norm.weight": ((64,), f32),
            f"blk.{n}.ffn_gate.weight": ((256, 64), f16),
            f"blk.{n}.ffn_up.weight": ((256, 64), f16),
            f"blk.{n}.ffn_down.weight": ((64, 256), f16),
        }

    assert tensors == expected
    weights = reader.get_tensor(0).data.astype(np.float32)
    assert 0.015 < float(weights.std()) < 0.025
    norms = [t for t in reader.tensors if t.name.endswith("norm.weight")]
    assert all(np.all(t.data == 1.0) for t in norms)


def test_model_stays_small(model: Path) -> None:
    assert model.stat().st_size <= tinymodel.MAX_BYTES


def test_chat_template_renders_plain_role_lines(model: Path) -> None:
    template = _field(gguf.GGUFReader(model), "tokenizer.chat_template")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]

    rendered = jinja2.Environment().from_string(template).render(messages=messages, add_generation_prompt=True)

    assert rendered == "System: Be brief.\nUser: Hi\nAssistant: Hello\nUser: Bye\nAssistant:"


def test_a_file_without_tokens_or_of_another_architecture_is_refused(tmp_path: Path) -> None:
    empty = gguf.GGUFWriter(tmp_path / "empty.gguf", "llama")
    empty.write_header_to_file()
    empty.write_kv_data_to_file()
    empty.write_tensors_to_file()
    empty.close()

    with pytest.raises(ValueError, match=r"no tokenizer\.ggml\.tokens"):
        tinymodel.write_tiny_model(tmp_path / "empty.gguf", tmp_path / "out.gguf")
    with pytest.raises(ValueError, match="not a llama GGUF"):
        tinymodel.write_tiny_model(_synthetic_vocab(tmp_path / "gpt2.gguf", arch="gpt2"), tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_the_prefill_heavy_shape_writes_its_context_width_and_layers(vocab: Path, tmp_path: Path) -> None:
    shape = tinymodel.PREFILL_HEAVY
    path = tinymodel.write_tiny_model(vocab, tmp_path / "heavy.gguf", shape)
    reader = gguf.GGUFReader(path)
    assert _field(reader, "llama.context_length") == shape.context_length == 4096
    assert _field(reader, "llama.embedding_length") == shape.embedding_length
    assert _field(reader, "llama.block_count") == shape.block_count
    names = {t.name for t in reader.tensors}
    assert f"blk.{shape.block_count - 1}.ffn_down.weight" in names
    assert f"blk.{shape.block_count}.ffn_down.weight" not in names
    ffn_down = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    assert sorted(int(d) for d in ffn_down.shape) == [shape.embedding_length, shape.feed_forward_length]


def test_the_lora_adapter_pairs_the_base_weights_as_llama_cpp_checks_them(model: Path, tmp_path: Path) -> None:
    adapter = gguf.GGUFReader(tinymodel.write_tiny_lora(tinymodel.TINY, tmp_path / "lora.gguf"))
    base = {t.name: tuple(int(d) for d in t.shape) for t in gguf.GGUFReader(model).tensors}

    assert _field(adapter, "general.architecture") == "llama"
    assert _field(adapter, "general.type") == "adapter"
    assert _field(adapter, "adapter.type") == "lora"
    assert _field(adapter, "adapter.lora.alpha") == pytest.approx(tinymodel.LORA_RANK)
    pairs = {t.name: tuple(int(d) for d in t.shape) for t in adapter.tensors}
    assert len(pairs) == 2 * 3 * tinymodel.TINY.block_count
    for name, shape in pairs.items():
        weight, part = name.rsplit(".", 1)
        assert weight in base, name
        # llama.cpp (ggml order, innermost first): a = [in, rank], b = [rank, out] for a base weight [in, out].
        (inner, outer) = base[weight]
        assert shape == ((inner, tinymodel.LORA_RANK) if part == "lora_a" else (tinymodel.LORA_RANK, outer)), name


def test_the_lora_adapter_is_reproducible_and_its_seed_changes_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "99"}
    command = [sys.executable, "-m", "llmaz_dev.tinymodel", "--lora", "--out", str(tmp_path / "cli.gguf")]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    here = tinymodel.write_tiny_lora(tinymodel.TINY, tmp_path / "here.gguf")
    other = tinymodel.write_tiny_lora(tinymodel.TINY, tmp_path / "other.gguf", seed=1)

    assert (tmp_path / "cli.gguf").read_bytes() == here.read_bytes() != other.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_cli_needs_a_vocabulary_for_the_model_only(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "llmaz_dev.tinymodel", "--out", str(tmp_path / "m.gguf")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)

    assert result.returncode == 2
    assert "--vocab is required to write the model" in result.stderr
