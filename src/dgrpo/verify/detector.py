"""A trained detector of poisoned completions: a causal LM with a LoRA adapter and a 2-way head.

Issue 16, point 3 (docs/detector.md). The base model (SmolLM2-135M-Instruct by default, loaded like
the policy: the embedded GGUF through its safetensors cache, a local folder or a hub id) becomes
``AutoModelForSequenceClassification`` with ``num_labels=2``: the hidden state of the last token of
the input goes through a linear ``score`` head. peft's ``LoraConfig(task_type="SEQ_CLS")`` adds LoRA
to the attention projections and trains the head in full (``modules_to_save``); the base weights stay
frozen. Label 1 = poisoned (malicious), 0 = honest; :meth:`Detector.score` returns
P(poisoned) = softmax(logits)[:, 1].

Input (``TEMPLATE_VERSION`` 1; :func:`format_pair`): the question and the completion *after the task's
prefill* (what a rollout's text and ``benchmarks/heterogeneous_table1/sample.py``'s ``text`` hold),
each cut to ``16 × max_length`` characters (start and end kept), folded by
:func:`dgrpo.verify.normalize.fold_prose` (NFKD, invisible characters and accents removed, NFKC, every
space one ``" "``, whitespace runs collapsed, lone surrogates ``?``) and stripped of the judge's markers to a fixed point
(:func:`dgrpo.verify.markers.strip_markers`), between those markers::

    Question:
    {question}
    <<<SOLUTION
    {completion}
    SOLUTION>>>

The folding is the identity on ASCII text whose whitespace is single spaces and single newlines, so
a detector trained before it (same ``TEMPLATE_VERSION``) reads such text exactly as it did; text with
tabs, runs of whitespace or non-ASCII characters now reads as its folded form.

Special-token strings inside the texts (``<|im_end|>``) are tokenized as plain text, so a completion
cannot end the input early or pose as padding. :meth:`Detector.score` reads a completion longer than
its share of ``max_length`` tokens in overlapping windows (:meth:`Detector.windows`) and keeps the
highest P(poisoned); training (:meth:`Detector.encode`) reads its first and last halves.

This module loads torch, transformers and peft inside its functions (a config check reads
``detector.json`` through :func:`read_meta` without them). Training the adapter and head is
:mod:`dgrpo.verify.detector_train`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import NamedTuple, Sequence

from dgrpo.errors import PolicyLoadError
from dgrpo.verify.detector_meta import (META_FILE, TEMPLATE_VERSION, DetectorMeta, _base_shape,  # noqa: F401
                                        base_fingerprint, check_fingerprint, read_meta)
from dgrpo.verify.markers import strip_markers
from dgrpo.verify.normalize import fold_prose

log = logging.getLogger(__name__)

MAX_WINDOWS = 8  # windows read per completion at most; a longer one is flagged (Detector.windows)
CHARS_PER_TOKEN = 16  # a text is cut to CHARS_PER_TOKEN × max_length characters before tokenising
_HEAD = "Question:\n{question}\n<<<SOLUTION\n"
_TAIL = "\nSOLUTION>>>"
LABELS = ("honest", "poisoned")  # label index 0, 1


class Example(NamedTuple):
    """One training or evaluation completion: ``label`` 1 = poisoned, 0 = honest; ``set`` its kind."""

    question: str
    completion: str
    label: int
    set: str = ""


def cut(text: str, max_chars: int | None) -> str:
    """``text``, or its first and last ``max_chars // 2`` characters when it is longer than ``max_chars``."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max_chars - max_chars // 2] + text[len(text) - max_chars // 2:]


def clean(text: str, max_chars: int | None = None) -> str:
    """One text as template 1 reads it: :func:`cut`, :func:`fold_prose`, markers stripped to a fixed
    point, folded again (a removed marker can leave two spaces side by side), cut again (NFKC can
    lengthen a text: U+FDFA is 18 characters), so the result has at most ``max_chars`` characters, and
    markers stripped once more (the last cut joins two halves, which can rebuild one)."""
    return strip_markers(cut(fold_prose(strip_markers(fold_prose(cut(text, max_chars)))), max_chars))


def format_pair(question: str, completion: str, max_chars: int | None = None) -> tuple[str, str, str]:
    """(head, completion, tail) texts of template 1: each text :func:`clean`-ed (at most ``max_chars``
    characters each before folding; None: no cut)."""
    return _HEAD.format(question=clean(question, max_chars)), clean(completion, max_chars), _TAIL


def _load_base(base_model: str, dtype: str, device, seed: int | None = None):
    """(sequence-classification model, tokenizer) of ``base_model`` with a fresh 2-way head (seeded)."""
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification

    from dgrpo.policy.device import resolve_device
    from dgrpo.policy.loading import _DTYPES, load_tokenizer, resolve_model_path

    if dtype not in _DTYPES:
        raise PolicyLoadError(f"detector dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    tokenizer = load_tokenizer(base_model)
    if seed is not None:
        torch.manual_seed(seed)  # the head's initial weights
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # "score.weight newly initialized": expected, it is trained
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            resolve_model_path(base_model), num_labels=2, pad_token_id=tokenizer.pad_token_id, dtype=_DTYPES[dtype])
    except OSError as err:
        raise PolicyLoadError(f"cannot load detector base model {base_model!r}: {err}") from err
    finally:
        transformers.logging.set_verbosity(verbosity)
    return model.to(resolve_device(device) if isinstance(device, str) else device), tokenizer


class Detector:
    """A loaded or freshly trained detector: ``score`` gives P(poisoned) of (question, completion) pairs.

    Attributes:
        model: the peft-wrapped sequence-classification model (eval mode, no gradients at scoring).
        tokenizer: the base model's tokenizer.
        meta: the ``detector.json`` fields (base_model, template_version, max_length, threshold, ...).
    """

    def __init__(self, model, tokenizer, meta: dict):
        self.model, self.tokenizer, self.meta = model, tokenizer, meta
        self.max_length = int(meta["max_length"])
        self.max_chars = CHARS_PER_TOKEN * self.max_length
        self.max_windows = MAX_WINDOWS

    def _parts(self, question: str, completion: str) -> tuple[list[int], list[int], list[int], int]:
        """(head, completion, tail) token ids and the completion's budget of tokens in one input."""
        head, body, tail = (self.tokenizer(t, add_special_tokens=False, split_special_tokens=True)["input_ids"]
                            for t in format_pair(question, completion, self.max_chars))
        room = self.max_length - len(tail)
        if len(head) > room // 2:  # a very long question keeps its start; the completion at least half
            head = head[: room // 2]
        return head, body, tail, room - len(head)

    def encode(self, question: str, completion: str) -> list[int]:
        """Token ids of one pair under template 1, at most ``max_length`` (the completion's middle cut):
        the input :func:`dgrpo.verify.detector_train.fit` trains on."""
        head, body, tail, budget = self._parts(question, completion)
        if len(body) > budget:
            body = body[: budget - budget // 2] + (body[-(budget // 2):] if budget // 2 else [])
        return head + body + tail

    def windows(self, question: str, completion: str) -> list[list[int]]:
        """The inputs :meth:`score` reads for one pair: ``head + a slice of the completion + tail``.

        A completion of at most ``budget = max_length - len(head) - len(tail)`` tokens is one window,
        equal to :meth:`encode`. A longer one gives windows of ``budget`` tokens starting every
        ``stride = ceil(budget / 2)`` tokens, the last ending at the completion's end, so together they
        cover it and any span of at most ``budget // 2`` tokens lies whole in one window. Count:
        ``ceil((len - budget) / stride) + 1``. More than :data:`MAX_WINDOWS` gives none: :meth:`score` flags
        the pair (P = 1), so a peer cannot cost an honest node more than ``MAX_WINDOWS`` forward passes a
        completion (an honest one of ≤ 512 tokens needs at most 4 at ``max_length`` 384).
        """
        head, body, tail, budget = self._parts(question, completion)
        if len(body) <= budget:
            return [head + body + tail]
        stride = max(1, -(-budget // 2))
        starts = list(range(0, len(body) - budget, stride)) + [len(body) - budget]
        if len(starts) > self.max_windows:
            return []  # too long to read whole at a bounded cost: :meth:`score` flags it (fail closed)
        return [head + body[s : s + budget] + tail for s in starts]

    def _batch(self, encoded: list[list[int]]):
        import torch

        device = next(self.model.parameters()).device
        width = max(map(len, encoded))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([e + [pad] * (width - len(e)) for e in encoded], device=device)
        mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encoded], device=device)
        return ids, mask

    def logits(self, encoded: list[list[int]]):
        """(N, 2) float32 logits of encoded inputs (one right-padded batch; the head reads the last real token)."""
        ids, mask = self._batch(encoded)
        return self.model(input_ids=ids, attention_mask=mask).logits.float()

    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int = 16):
        """P(poisoned) of each (question, completion) pair: a (N,) float32 CPU tensor, in input order.

        A pair's score is the highest P(poisoned) over its :meth:`windows` (one window, hence the same
        score as before windows existed, when the completion fits). Inputs are batched by length
        (shortest first) under ``torch.no_grad`` in eval mode; cost: one forward pass of at most
        ``max_length`` tokens per window.
        """
        import torch

        encoded, owner = [], []
        for i, (q, c) in enumerate(pairs):
            for w in self.windows(q, c):
                encoded.append(w)
                owner.append(i)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        flat = torch.empty(len(encoded), dtype=torch.float32)
        self.model.eval()
        with torch.no_grad():
            for b in range(0, len(order), batch_size):
                idx = order[b : b + batch_size]
                flat[idx] = torch.softmax(self.logits([encoded[i] for i in idx]), -1)[:, 1].cpu()
        read = set(owner)
        best = [0.0 if i in read else 1.0 for i in range(len(pairs))]  # no window: over MAX_WINDOWS
        for i, p in zip(owner, flat.tolist()):
            best[i] = max(best[i], p)
        return torch.tensor(best, dtype=torch.float32)


def build_detector(base_model: str, *, lora_rank: int = 16, lora_alpha: int = 32, max_length: int = 384,
                   threshold: float = 0.5, seed: int = 0, dtype: str = "float32", device: str = "cpu",
                   target_modules: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj")) -> Detector:
    """An untrained detector: the base model, a seeded 2-way head and zero-initialised LoRA (peft's B = 0).

    Raises:
        PolicyLoadError: the base model cannot be loaded or ``dtype`` is unknown.
    """
    from peft import LoraConfig, get_peft_model

    model, tokenizer = _load_base(base_model, dtype, device, seed)
    fingerprint = base_fingerprint(model)
    lora = LoraConfig(task_type="SEQ_CLS", r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                      target_modules=list(target_modules))
    meta = {"base_model": base_model, "template_version": TEMPLATE_VERSION, "max_length": max_length,
            "threshold": threshold, "base_shape": _base_shape(model.config), "base_fingerprint": fingerprint,
            "labels": list(LABELS),
            "lora": {"rank": lora_rank, "alpha": lora_alpha, "target_modules": list(target_modules)}}
    return Detector(get_peft_model(model, lora), tokenizer, meta)


def save_detector(det: Detector, out_dir: str | Path) -> Path:
    """Write the adapter and head (peft ``save_pretrained``) and ``detector.json`` to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    det.model.save_pretrained(out)
    (out / META_FILE).write_text(json.dumps(det.meta, indent=2) + "\n", encoding="utf-8")
    return out


def load_detector(out_dir: str | Path, device: str = "cpu", dtype: str = "float32",
                  base_model: str | None = None) -> Detector:
    """Load a detector saved by :func:`dgrpo.verify.detector_train.train_detector` (frozen, eval mode).

    Args:
        out_dir: the folder with ``detector.json`` and the adapter.
        device, dtype: where and how the base weights load.
        base_model: expected base model; None = the one ``detector.json`` names.

    Raises:
        PolicyLoadError: not a detector folder (:func:`read_meta`), ``base_model`` differs from the
            recorded one or cannot be loaded, the base model's shape (vocab, width, depth) or weights
            (:func:`base_fingerprint`) are not the ones it was trained on, or the adapter files are
            missing, unreadable or do not fit the base model. A ``detector.json`` without
            ``base_fingerprint`` (written before it existed) loads with a logged warning.
    """
    from peft import PeftModel
    from safetensors import SafetensorError

    meta = read_meta(out_dir)
    where = f"detector {str(out_dir)!r}"
    if base_model is not None and base_model != meta["base_model"]:
        raise PolicyLoadError(f"{where} was trained on base_model {meta['base_model']!r}, not "
                              f"{base_model!r}; use its base model or retrain")
    try:
        model, tokenizer = _load_base(meta["base_model"], dtype, device)
    except PolicyLoadError as err:
        raise PolicyLoadError(f"{where}: base_model {meta['base_model']!r} of its {META_FILE} cannot be loaded "
                              f"({err}); point base_model in {META_FILE} at the base weights it was trained on") from None
    shape = _base_shape(model.config)
    if shape != meta["base_shape"]:
        raise PolicyLoadError(f"{where}: base_model {meta['base_model']!r} now has shape {shape}, "
                              f"trained on {meta['base_shape']}; restore that base model or retrain")
    if meta.get("base_fingerprint") is None:
        log.warning("%s: %s has no base_fingerprint (trained before dgrpo recorded one): the base weights are "
                    "not checked; retrain it to record them", where, META_FILE)
    else:
        try:
            diff = check_fingerprint(meta["base_fingerprint"], base_fingerprint(model))
        except (TypeError, ValueError, KeyError, AttributeError) as e:  # a hand-edited fingerprint
            raise PolicyLoadError(f"{where}: base_fingerprint of its {META_FILE} is malformed; retrain it") from None
        if diff:
            raise PolicyLoadError(f"{where}: base_model {meta['base_model']!r} has other weights than the ones it was "
                                  f"trained on ({diff}); point base_model in {META_FILE} at the original weights "
                                  f"or retrain the detector")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (Path(out_dir) / name).is_file():
            raise PolicyLoadError(f"{where} has no {name}: an incomplete detector folder; copy the whole --out "
                                  f"folder of `dgrpo detector train` or retrain it")
    try:
        model = PeftModel.from_pretrained(model, str(out_dir), is_trainable=False)
    except (OSError, ValueError, RuntimeError, SafetensorError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise PolicyLoadError(f"{where}: cannot load its adapter ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                              f"retrain it") from None  # garbage file, a size mismatch, a hand-edited config
    bad = [n for n, p in model.named_parameters() if ("lora_" in n or "score" in n) and not p.isfinite().all()]
    if bad:  # NaN weights would score every completion NaN, which max() reads as 0: accept everything
        raise PolicyLoadError(f"{where}: its adapter holds NaN or infinite weights ({bad[0]}, {len(bad)} tensors); "
                              f"retrain it")
    model.eval()
    return Detector(model, tokenizer, meta)
