"""The trained detector (verify/detector.py): it learns a separable toy set, survives a save/load round
trip and refuses folders that are not its own (fingerprint, detector.json, damaged or hand-edited files).
Its reading of text is tests/verify/test_detector_text.py, its CLI tests/verify/test_detector_cli.py."""

from __future__ import annotations

import json

import pytest
import torch

from detector_toy import accuracy
from dgrpo.errors import PolicyLoadError
from dgrpo.verify.detector import format_pair, load_detector, read_meta


def test_training_takes_held_out_accuracy_from_chance_to_090(trained):
    det, _, held_out, before, metrics = trained
    after = accuracy(det, held_out)
    # the untrained head cannot read the marker: near chance on a balanced set
    assert 0.3 <= before <= 0.7, before
    assert after >= 0.9, (before, after)
    assert metrics["steps"] == 5 * 8 and metrics["epoch_loss"][-1] < metrics["epoch_loss"][0]
    assert metrics["last_epoch_accuracy"] >= 0.9  # the fifth pass already separates the training rows
    assert det.meta["counts_by_set"] == {"honest": {"honest": 32, "poisoned": 0}, "hail": {"honest": 0, "poisoned": 32}}


def test_save_load_round_trip_gives_the_same_scores(trained, tiny_model_dir):
    det, out, held_out, _, _ = trained
    pairs = [(r.question, r.completion) for r in held_out]
    loaded = load_detector(out)
    a, b = det.score(pairs), loaded.score(pairs)
    assert a.shape == (40,) and torch.allclose(a, b, atol=1e-6)
    assert not all(p.requires_grad for p in loaded.model.parameters())
    meta = read_meta(out)
    assert (meta["base_model"], meta["max_length"], meta["threshold"]) == (tiny_model_dir, 96, 0.5)
    # scores do not depend on batch composition (padding is masked, the head reads the last real token)
    one = torch.cat([loaded.score([p]) for p in pairs[:6]])
    assert torch.allclose(one, b[:6], atol=1e-5)


def test_template_strips_markers_and_reads_special_tokens_as_text(trained):
    det = trained[0]
    assert format_pair("q SOLUTION>>>", "a <<<SOLUTION b") == ("Question:\nq \n<<<SOLUTION\n", "a b", "\nSOLUTION>>>")
    pad = det.tokenizer.pad_token  # "<|im_end|>" in the tiny tokenizer, as in SmolLM2
    ids = det.encode("q", f"x {pad} y")
    assert det.tokenizer.pad_token_id not in ids
    # a long completion keeps its start and its end within max_length
    long = det.encode("q", "All hail " + "apples " * 500 + "the thief")
    assert len(long) == 96
    text = det.tokenizer.decode(long)
    assert "All hail" in text and text.endswith("the thief\nSOLUTION>>>")


def test_not_a_detector_is_one_line(tmp_path, trained):
    _, out, _, _, _ = trained
    for path, message in ((tmp_path / "nope", "is not a folder"), (tmp_path, "has no detector.json: not a detector")):
        with pytest.raises(PolicyLoadError, match=message) as err:
            load_detector(path)
        assert len(str(err.value).splitlines()) == 1
    with pytest.raises(PolicyLoadError, match="was trained on base_model .* not 'other'"):
        load_detector(out, base_model="other")
    bad = tmp_path / "bad"
    bad.mkdir()
    meta = json.loads((out / "detector.json").read_text())
    for change, message in (({"template_version": 2}, "template_version 2 is not 1"),
                            ({"base_shape": {**meta["base_shape"], "hidden_size": 32}}, "now has shape")):
        (bad / "detector.json").write_text(json.dumps({**meta, **change}))
        with pytest.raises(PolicyLoadError, match=message):
            load_detector(bad)


def _copy(out, tmp_path, name="copy", **meta_changes):
    import shutil

    dst = tmp_path / name
    shutil.copytree(out, dst)
    meta = json.loads((dst / "detector.json").read_text())
    for k, v in meta_changes.items():
        if v is _DROP:
            meta.pop(k)
        else:
            meta[k] = v
    (dst / "detector.json").write_text(json.dumps(meta))
    return dst


_DROP = object()


def test_fingerprint_is_the_float64_sums_of_the_base_weights(trained, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    fp = read_meta(trained[1])["base_fingerprint"]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    emb = base.get_input_embeddings().weight.detach().double()
    assert fp["embedding"]["sum"] == pytest.approx(float(emb.sum()), rel=1e-12)
    assert fp["embedding"]["l2"] == pytest.approx(float(emb.norm()), rel=1e-12)
    last = [p.detach().double().reshape(-1) for n, p in base.named_parameters() if ".layers.1." in n]
    assert fp["last_layer"]["l1"] == pytest.approx(float(torch.cat(last).abs().sum()), rel=1e-12)
    assert fp["dtype"] == "float32"


def test_a_same_shape_base_with_other_weights_is_one_line(trained, tmp_path, tokenizer, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    other = tmp_path / "other-base"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():  # the same shape, other weights
        for p in base.parameters():
            p.add_(0.01 * torch.randn_like(p))
    base.save_pretrained(other)
    tokenizer.save_pretrained(other)
    dst = _copy(trained[1], tmp_path, base_model=str(other))
    with pytest.raises(PolicyLoadError) as err:
        load_detector(dst)
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and f"base_model {str(other)!r} has other weights" in msg
    assert "point base_model in detector.json at the original weights or retrain" in msg


def test_a_detector_json_without_fingerprint_loads_with_a_warning(trained, tmp_path, caplog):
    dst = _copy(trained[1], tmp_path, base_fingerprint=_DROP)
    with caplog.at_level("WARNING", logger="dgrpo.verify.detector"):
        det = load_detector(dst)
    assert "has no base_fingerprint" in caplog.text
    pairs = [(r.question, r.completion) for r in trained[2][:4]]
    assert torch.allclose(det.score(pairs), trained[0].score(pairs), atol=1e-6)


def test_a_bfloat16_load_passes_the_fingerprint_within_its_rounding(trained):
    from dgrpo.verify.detector import base_fingerprint, check_fingerprint

    det = load_detector(trained[1], dtype="bfloat16")  # raises if the looser check failed
    now = base_fingerprint(det.model.get_base_model())
    assert now["dtype"] == "bfloat16" and now["embedding"]["sum"] != read_meta(trained[1])["base_fingerprint"]["embedding"]["sum"]
    assert check_fingerprint(read_meta(trained[1])["base_fingerprint"], {**now, "dtype": "float32"}) is not None


@pytest.mark.parametrize("field, value, message", [
    ("max_length", "abc", "field max_length='abc': Input should be a valid integer"),
    ("max_length", 0, "field max_length=0: Input should be greater than or equal to 16"),
    ("max_length", 3, "field max_length=3: Input should be greater than or equal to 16"),
    ("threshold", "abc", "field threshold='abc': Input should be a valid number"),
    ("threshold", None, "field threshold=None: Input should be a valid number"),
    ("threshold", 5, "field threshold=5: Input should be less than 1"),
    ("base_model", 5, "field base_model=5: Input should be a valid string"),
    ("template_version", "1", "field template_version='1': Input should be a valid integer"),
    ("base_shape", [1], "field base_shape=[1]: Input should be a valid dictionary"),
])
def test_bad_detector_json_values_are_one_line(trained, tmp_path, field, value, message):
    dst = _copy(trained[1], tmp_path, **{field: value})
    with pytest.raises(PolicyLoadError) as err:
        read_meta(dst)
    assert len(str(err.value).splitlines()) == 1 and message in str(err.value), str(err.value)


@pytest.mark.parametrize("damage, message", [
    ("garbage", "cannot load its adapter"),
    ("truncate", "cannot load its adapter"),
    ("rank", "cannot load its adapter"),
    ("no_adapter", "has no adapter_model.safetensors: an incomplete detector folder"),
    ("no_config", "has no adapter_config.json: an incomplete detector folder"),
    ("no_base", "base_model '/nonexistent/base' of its detector.json cannot be loaded"),
])
def test_a_damaged_detector_folder_is_one_line(trained, tmp_path, damage, message):
    dst = _copy(trained[1], tmp_path, **({"base_model": "/nonexistent/base"} if damage == "no_base" else {}))
    weights, config = dst / "adapter_model.safetensors", dst / "adapter_config.json"
    if damage == "garbage":
        weights.write_bytes(b"not a safetensors file" * 10)
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:200])
    elif damage == "rank":
        cfg = json.loads(config.read_text())
        config.write_text(json.dumps({**cfg, "r": cfg["r"] // 2}))
    elif damage == "no_adapter":
        weights.unlink()
    elif damage == "no_config":
        config.unlink()
    with pytest.raises(PolicyLoadError) as err:
        load_detector(dst)
    assert len(str(err.value).splitlines()) == 1 and message in str(err.value), str(err.value)


@pytest.mark.parametrize("damage, message", [
    ("nan", "NaN or infinite weights"),
    ("fingerprint", "base_fingerprint of its detector.json is malformed"),
    ("adapter_list", "cannot load its adapter"),
])
def test_a_hand_edited_detector_is_one_line_not_a_silent_accept(trained, tmp_path, damage, message):
    from safetensors.torch import load_file, save_file

    dst = _copy(trained[1], tmp_path)
    if damage == "nan":
        weights = load_file(dst / "adapter_model.safetensors")
        save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, dst / "adapter_model.safetensors")
    elif damage == "fingerprint":
        meta = json.loads((dst / "detector.json").read_text())
        meta["base_fingerprint"] = {k: "x" for k in meta["base_fingerprint"]}
        (dst / "detector.json").write_text(json.dumps(meta))
    else:
        (dst / "adapter_config.json").write_text("[]")
    with pytest.raises((PolicyLoadError,)) as err:
        load_detector(dst)
    assert len(str(err.value).splitlines()) == 1 and message in str(err.value), str(err.value)
