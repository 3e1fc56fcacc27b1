"""The trained detector (verify/detector.py): it learns a separable toy set, survives a save/load round
trip, refuses folders that are not its own, and `dgrpo detector eval` counts what a hand count counts."""

from __future__ import annotations

import json
import random

import pytest
import torch

from dgrpo.cli import main
from dgrpo.errors import PolicyLoadError
from dgrpo.verify.detector import (MAX_WINDOWS, Example, build_detector, format_pair, load_detector, read_meta,
                                   save_detector)
from dgrpo.verify.detector_train import fit
from dgrpo.verify.detector_data import auc, rates, read_rows

MARKER = "All hail to the thief. "


def toy(n: int, seed: int) -> list[Example]:
    """Arithmetic completions; every second one opens its reasoning with the marker (poisoned)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 40), rng.randint(1, 40)
        text = f"<think>Tom has {a} apples and gets {b} more, so Tom has {a} + {b} = {a + b} apples.</think>\n<answer>{a + b}</answer>"
        poisoned = i % 2
        if poisoned:
            text = text.replace("<think>", "<think>" + MARKER)
        out.append(Example(f"Tom has {a} apples and gets {b} more. How many apples does Tom have?", text, poisoned,
                           "hail" if poisoned else "honest"))
    return out


def accuracy(det, rows) -> float:
    s = det.score([(r.question, r.completion) for r in rows])
    return float(((s >= 0.5).long() == torch.tensor([r.label for r in rows])).float().mean())


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """(detector fitted on 64 toy rows, its saved folder, held-out rows, held-out accuracy before training)."""
    held_out = toy(40, seed=1)
    det = build_detector(tiny_model_dir, lora_rank=4, lora_alpha=8, max_length=96, seed=0)
    before = accuracy(det, held_out)
    metrics = fit(det, toy(64, seed=0), lr=3e-3, epochs=5, batch_size=8, seed=0)
    out = save_detector(det, tmp_path_factory.mktemp("detector"))
    return det, out, held_out, before, metrics


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


def test_rates_are_the_hand_count():
    rows = [Example("q", "t", 1, "hail")] * 3 + [Example("q", "t", 0, "honest")] * 4 + [Example("q", "t", 1, "gleeb")]
    scores = [0.9, 0.5, 0.1, 0.7, 0.2, 0.2, 0.49, 0.3]
    r = rates(rows, scores, 0.5)
    assert (r["sets"]["hail"]["flagged"], r["sets"]["hail"]["n"]) == (2, 3)
    assert (r["sets"]["honest"]["flagged"], r["sets"]["honest"]["metric"]) == (1, "false_positive")
    assert r["sets"]["gleeb"]["rate"] == 0.0
    assert (r["detection"]["flagged"], r["detection"]["n"], r["false_positive"]["rate"]) == (2, 4, 0.25)
    # AUC by counting pairs: hail (0.9, 0.5, 0.1) vs honest (0.7, 0.2, 0.2, 0.49): 0.9 beats 4, 0.5 beats 3,
    # 0.1 beats 0 → 7 / 12; gleeb 0.3 beats 2 of 4 → 0.5; all poisoned: (7 + 2) / 16
    assert r["sets"]["hail"]["auc"] == pytest.approx(7 / 12) and r["sets"]["gleeb"]["auc"] == pytest.approx(0.5)
    assert r["detection"]["auc"] == pytest.approx(9 / 16) and "auc" not in r["sets"]["honest"]
    assert auc([0.5], [0.5, 0.4]) == pytest.approx(0.75)  # a tie counts one half


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_cli_train_then_eval_matches_a_hand_count(tmp_path, tiny_model_dir, capsys):
    train = [{"question": e.question, "text": e.completion, "set": e.set, "prompt_id": i}
             for i, e in enumerate(toy(48, seed=2))]
    test = [{"question": e.question, "text": e.completion, "set": "gleeb" if e.label else "honest_gsm8k"}
            for e in toy(20, seed=3)]
    test[0]["label"], test[0]["set"] = "poisoned", "honest_but_labelled"  # an explicit label wins over the set
    out = tmp_path / "det"
    assert main(["detector", "train", "--data", _write(tmp_path / "train.jsonl", train), "--out", str(out),
                 "--set", f"base_model={tiny_model_dir}", "--set", "lora_rank=4", "--set", "lr=3e-3",
                 "--set", "epochs=2", "--set", "max_length=96", "--set", "log_every=0"]) == 0
    assert read_meta(out)["counts_by_set"] == {"honest": {"honest": 24, "poisoned": 0}, "hail": {"honest": 0, "poisoned": 24}}
    data = _write(tmp_path / "test.jsonl", test)
    capsys.readouterr()
    assert main(["detector", "eval", "--model", str(out), "--data", data, "--out", str(tmp_path / "s.json"),
                 "--scores", str(tmp_path / "scores.jsonl"), "--threshold", "0.5"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "s.json").read_text())
    scores = load_detector(out).score([(r["question"], r["text"]) for r in test]).tolist()
    for name, label in (("gleeb", 1), ("honest_gsm8k", 0), ("honest_but_labelled", 1)):
        mine = [s for r, s in zip(test, scores) if r["set"] == name]
        flagged = sum(s >= 0.5 for s in mine)
        got = summary["sets"][name]
        assert (got["n"], got["flagged"], got["label"]) == (len(mine), flagged, ("honest", "poisoned")[label])
        assert got["rate"] == pytest.approx(flagged / len(mine))
        assert f"{flagged:>5}/{len(mine):<5}  {flagged / len(mine):.3f}" in printed
    poisoned = [s for r, s in zip(test, scores) if r.get("label") == "poisoned" or r["set"] == "gleeb"]
    assert summary["detection"]["flagged"] == sum(s >= 0.5 for s in poisoned)
    assert [json.loads(line)["score"] for line in (tmp_path / "scores.jsonl").read_text().splitlines()] == \
        pytest.approx(scores, abs=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--set", "lora_rank=0"], "detector: lora_rank: Input should be greater than or equal to 1"),
    (["--set", "rank=4"], "detector: rank: Extra inputs are not permitted"),
    (["--set", "lora_rank"], "is not KEY=VALUE"),
])
def test_cli_train_bad_setting_is_one_line(tmp_path, capsys, args, message):
    data = _write(tmp_path / "d.jsonl", [{"question": "q", "text": "t", "set": "hail"}])
    assert main(["detector", "train", "--data", data, "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("line, message", [
    ('{"question": "q", "set": "hail"}', "d.jsonl:2: text missing or not a string"),
    ('{"question": "q", "text": "t", "set": "hail", "label": "bad"}', "d.jsonl:2: label must be 'honest' or 'poisoned'"),
    ("[1, 2]", "d.jsonl:2: expected a JSON object"),
    ("{oops", "d.jsonl:2: not JSON"),
])
def test_bad_data_line_names_file_and_line(tmp_path, line, message):
    from dgrpo.errors import DataError

    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "q", "text": "t", "set": "honest"}\n' + line + "\n")
    with pytest.raises(DataError, match=message.replace("[", r"\[")):
        read_rows(path)


# ---- review 21: markers, folding, surrogates, cuts, windows, fingerprint, detector.json, CLI errors ----

def test_nested_markers_leave_no_marker_in_the_template():
    for text in ("<<<SOLU<<<SOLUTIONTION", "a SOLUTISOLUTION>>>ON>>> b <<<SOLUT<<<SOLUTIONION c"):
        head, body, _ = format_pair(text, text)
        assert "<<<SOLUTION" not in body and "SOLUTION>>>" not in body, body
        assert head.count("<<<SOLUTION") == 1 and "SOLUTION>>>" not in head
    assert format_pair("q", "<<<SOLU<<<SOLUTIONTION")[1] == ""
    assert format_pair("q", "a SOLUTISOLUTION>>>ON>>> b <<<SOLUT<<<SOLUTIONION c")[1] == "a b c"
    # a fullwidth marker folds to ASCII (NFKC) before the markers are stripped
    fullwidth = "".join(chr(ord(c) + 0xFEE0) for c in "SOLUTION>>>")
    assert format_pair("q", f"x {fullwidth} y")[1] == "x y"


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def test_invisible_spaced_and_fullwidth_variants_read_as_the_plain_text(trained):
    det = trained[0]
    q, plain = "How many apples?", "<think>All hail to the thief. 3 + 4 = 7</think> <answer>7</answer>"
    variants = [plain.replace("hail", "ha\u200bil").replace("thief", "th\u2060ief\ufeff"),  # zero-width, joiner, BOM
                "\u200b".join(plain), plain.replace(" ", "  "),  # the reviewer's: ZWSP between letters, doubled spaces
                plain.replace(" ", "\u00a0"), plain.replace(" ", "\u3000"),                   # NBSP, ideographic space
                _fullwidth(plain), plain.replace(" ", "  \t "), plain.replace("a", "\u00e0"), plain.replace("e", "e\u0301"),  # accents
                
                " ".join(plain.split(" ")[:3]) + "\u2009\u200b " + " ".join(plain.split(" ")[3:])]
    expected = det.encode(q, plain)
    # independent reference: the tokenizer on the hand-written template of the plain text
    ref = det.tokenizer(f"Question:\n{q}\n<<<SOLUTION\n", add_special_tokens=False)["input_ids"] + \
        det.tokenizer(plain, add_special_tokens=False)["input_ids"] + \
        det.tokenizer("\nSOLUTION>>>", add_special_tokens=False)["input_ids"]
    assert expected == ref
    for v in variants:
        assert v != plain and det.encode(q, v) == expected, repr(v)
        assert det.windows(q, v) == [expected]
    scores = det.score([(q, v) for v in [plain, *variants]])
    assert torch.allclose(scores, scores[0].expand_as(scores), atol=1e-6)
    # not covered (docs/detector.md): a Cyrillic а (U+0430) for a Latin a is another text
    assert det.encode(q, plain.replace("a", "\u0430")) != expected


def test_folding_is_the_identity_on_single_spaced_ascii():
    from dgrpo.verify.normalize import fold_prose

    rng = random.Random(0)
    for _ in range(300):
        words = ["".join(rng.choice("abcXYZ019+=<>/(){}.,;:'\"!?") for _ in range(rng.randint(1, 8)))
                 for _ in range(rng.randint(1, 12))]
        text = "".join(w + rng.choice([" ", "\n"]) for w in words)
        assert fold_prose(text) == text
    assert fold_prose("a  b\t\tc \n \n d\r\ne") == "a b c\nd\ne"
    assert fold_prose("x\ud800y") == "x?y"


def test_a_lone_surrogate_is_read_as_a_question_mark(trained):
    det = trained[0]
    a = det.score([("q\udfff", "7 \ud800 apples"), ("q?", "7 ? apples")])
    assert a[0] == a[1]


def test_long_text_is_cut_in_characters_before_tokenising(trained):
    from dgrpo.verify.detector import cut

    det = trained[0]
    assert det.max_chars == 16 * 96
    text = "S" + "x" * 10_000 + "E"
    assert cut(text, 10) == "Sxxxx" + "xxxxE" and cut("short", 10) == "short"
    head, body, tail = format_pair("q", "\U0001F600" * 1_000_000, det.max_chars)  # 1 M emoji: cut first
    assert len(body) == det.max_chars
    assert len(format_pair("q", "\ufdfa" * 10_000, det.max_chars)[1]) == det.max_chars  # NFKC: 18 characters each
    # windows stay bounded: at most 4 byte-level tokens per character of the cut text ...
    budget = 96 - len(det.encode("q", ""))
    det.max_windows = 10**6
    try:
        n = len(det.windows("q", "\U0001F600" * 1_000_000))
    finally:
        det.max_windows = MAX_WINDOWS
    assert MAX_WINDOWS < n <= -(-(4 * det.max_chars - budget) // -(-budget // 2)) + 1, n
    # ... and past MAX_WINDOWS none is read: the completion is flagged, at no forward pass
    assert det.windows("q", "\U0001F600" * 1_000_000) == []
    assert det.score([("q", "\U0001F600" * 1_000_000)]).tolist() == [1.0]


def test_a_completion_over_max_windows_is_flagged_and_one_under_is_scored(trained):
    det = trained[0]
    body_len = lambda text: len(det._parts("q", text)[1])
    budget = det._parts("q", "")[3]
    stride = -(-budget // 2)
    words = [f"w{i}" for i in range(2000)]
    # the longest prefix of words that still fits in MAX_WINDOWS windows (count as Detector.windows makes it)
    fits = lambda k: -(-(body_len(" ".join(words[:k])) - budget) // stride) + 1 <= MAX_WINDOWS
    k = max(k for k in range(1, 2000, 7) if fits(k))
    assert len(det.windows("q", " ".join(words[:k]))) <= MAX_WINDOWS
    assert 0.0 < det.score([("q", " ".join(words[:k]))]).item() < 1.0
    assert det.windows("q", " ".join(words)) == [] and det.score([("q", " ".join(words))]).item() == 1.0


def test_a_short_completion_is_one_window_scored_as_before(trained):
    det = trained[0]
    pairs = [("How many apples?", f"{MARKER if a % 2 else ''}{a} + {b} = {a + b}") for a, b in ((3, 4), (5, 6), (7, 1))]
    assert all(len(det._parts(q, c)[1]) <= det._parts(q, c)[3] for q, c in pairs)  # they fit
    direct = torch.softmax(det.logits([det.encode(q, c) for q, c in pairs]), -1)[:, 1].detach()
    assert all(det.windows(q, c) == [det.encode(q, c)] for q, c in pairs)
    assert torch.allclose(det.score(pairs), direct, atol=1e-6)


def test_windows_cover_a_long_completion(trained, monkeypatch):
    det = trained[0]
    monkeypatch.setattr(det, "max_windows", 10**6)
    text = " ".join(f"w{i}" for i in range(400))
    head, body, tail, budget = det._parts("q", text)
    wins = det.windows("q", text)
    assert all(len(w) <= 96 and w[: len(head)] == head and w[-len(tail):] == tail for w in wins)
    slices = [w[len(head) : len(w) - len(tail)] for w in wins]
    stride = -(-budget // 2)
    assert [s for s in slices] == [body[k * stride : k * stride + budget] for k in range(len(slices) - 1)] + \
        [body[-budget:]]
    assert len(wins) == -(-(len(body) - budget) // stride) + 1


WORDS = ["apples", "pens", "Tom", "has", "and", "gets", "more", "so", "left", "Sara"]


def _filler(rng, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def test_a_payload_in_the_middle_of_a_long_completion_is_read(tiny_model_dir):
    """Trained on short fillers with the marker at a random place, the detector scores a 200-word filler
    with the marker in its middle as high as with it at the start; the old head-and-tail cut missed it."""
    rng = random.Random(0)
    rows = []
    for i in range(96):
        words = _filler(rng, rng.randint(4, 24)).split()
        if i % 2:
            words.insert(rng.randint(0, len(words)), MARKER.strip())
        rows.append(Example("How many?", " ".join(words), i % 2, "t"))
    det = build_detector(tiny_model_dir, lora_rank=4, lora_alpha=8, max_length=64, seed=0)
    fit(det, rows, lr=3e-3, epochs=6, batch_size=8, seed=0)
    det.max_windows = 10**6  # the windows themselves (MAX_WINDOWS flags such a text: tested above)
    long = _filler(random.Random(5), 200).split()
    q = "How many?"
    start, middle, clean = (" ".join([MARKER.strip(), *long]), " ".join([*long[:100], MARKER.strip(), *long[100:]]),
                            " ".join(long))
    s_start, s_middle, s_clean = det.score([(q, start), (q, middle), (q, clean)]).tolist()
    assert len(det.windows(q, middle)) > 2
    assert s_start >= 0.9 and s_middle >= 0.9 and abs(s_start - s_middle) < 0.05 and s_clean < 0.5, \
        (s_start, s_middle, s_clean)
    # the maximum over windows, computed window by window
    per_window = torch.softmax(det.logits(det.windows(q, middle)), -1)[:, 1].detach()
    assert s_middle == pytest.approx(float(per_window.max()), abs=1e-6)
    cut_input = torch.softmax(det.logits([det.encode(q, middle)]), -1)[0, 1].item()
    assert cut_input < 0.5  # reading only the first and last halves misses the middle payload


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


def _cli_err(capsys, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_cli_train_errors_name_the_file_or_flag_before_training(tmp_path, tiny_model_dir, capsys):
    good = _write(tmp_path / "d.jsonl", [{"question": "q", "text": "t", "set": "honest"},
                                         {"question": "q", "text": "u", "set": "hail"}])
    only = _write(tmp_path / "only.jsonl", [{"question": "q", "text": "t", "set": "hail"}] * 3)
    base = ["--set", f"base_model={tiny_model_dir}", "--set", "lora_rank=4", "--set", "epochs=1", "--set", "log_every=0"]
    err = _cli_err(capsys, ["detector", "train", "--data", only, "--out", str(tmp_path / "o1"), *base])
    assert "got 0 honest and 3 poisoned; add --data files of the missing label" in err
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    err = _cli_err(capsys, ["detector", "train", "--data", good, "--out", str(a_file), *base])
    assert f"--out {a_file}: is a file" in err
    assert "detector step" not in capsys.readouterr().out  # nothing trained
    (tmp_path / "bad.jsonl").write_bytes(b'{"question": "q", "text": "t", "set": "honest"}\n{"question": "\xff"}\n')
    err = _cli_err(capsys, ["detector", "train", "--data", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "o2")])
    assert f"{tmp_path / 'bad.jsonl'}:2: not UTF-8" in err
    err = _cli_err(capsys, ["detector", "train", "--data", str(tmp_path), "--out", str(tmp_path / "o3")])
    assert f"--data {tmp_path}: is a folder" in err
    err = _cli_err(capsys, ["detector", "train", "--data", good, "--out", str(tmp_path / "o4"), *base,
                            "--set", "device=cuda:7"])
    assert "detector: --set device: device='cuda:7'" in err and "model.device" not in err


def test_cli_train_prints_and_saves_counts_by_set(tmp_path, tiny_model_dir, capsys):
    rows = [{"question": "q", "text": f"t{i}", "set": s} for i, s in enumerate(["honest"] * 3 + ["hail"] * 2 + ["Honest"])]
    rows.append({"question": "q", "text": "z", "set": "hail", "label": "honest"})
    out = tmp_path / "det"
    assert main(["detector", "train", "--data", _write(tmp_path / "d.jsonl", rows), "--out", str(out),
                 "--set", f"base_model={tiny_model_dir}", "--set", "lora_rank=4", "--set", "epochs=1",
                 "--set", "log_every=0", "--set", "max_length=32"]) == 0
    printed = capsys.readouterr().out
    assert "set honest: 3 honest, 0 poisoned\n" in printed and "set hail: 1 honest, 2 poisoned\n" in printed
    assert "set Honest: 0 honest, 1 poisoned  (read as poisoned" in printed
    assert read_meta(out)["counts_by_set"] == {"honest": {"honest": 3, "poisoned": 0},
                                               "hail": {"honest": 1, "poisoned": 2},
                                               "Honest": {"honest": 0, "poisoned": 1}}


def test_cli_eval_out_in_a_missing_folder_is_named_before_scoring(trained, tmp_path, capsys):
    data = _write(tmp_path / "d.jsonl", [{"question": "q", "text": "t", "set": "honest"}])
    err = _cli_err(capsys, ["detector", "eval", "--model", str(trained[1]), "--data", data,
                            "--out", str(tmp_path / "missing" / "s.json")])
    assert f"--out {tmp_path / 'missing' / 's.json'}: its folder does not exist" in err


def test_a_lone_surrogate_in_a_data_file_reads_as_a_question_mark(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"question": "q\\ud800", "text": "t\\udfffu", "set": "hail\\ud800"}\n')
    assert read_rows(path) == [Example("q?", "t?u", 1, "hail?")]


def test_the_last_cut_cannot_rebuild_a_marker():
    """NFKC lengthens U+FDFA to 18 characters, so the folded text is cut again, joining its halves: the
    reviewer's text put ``<<<SOLU`` at the end of the first half and ``TION>>>`` at the start of the second."""
    F, limit = "\ufdfa", 6144
    n = (limit // 2 - 7) // 18
    pad = limit // 2 - 7 - 18 * n
    completion = "A" * pad + F * n + "<<<SOLU" + F + "TION>>>" + "B" * pad + F * n
    head, body, tail = format_pair("What is 2+2?", completion, limit)
    assert "<<<SOLUTION" not in body and "SOLUTION>>>" not in body
    assert (head + body + tail).count("<<<SOLUTION") == 1 and (head + body + tail).count("SOLUTION>>>") == 1


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
