"""Training a detector (:mod:`dgrpo.verify.detector`): its LoRA and 2-way head fitted on labelled
completions (:func:`fit`), and build, fit and save in one call (:func:`train_detector`, ``dgrpo
detector train``). Loads torch, transformers and peft inside its functions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from dgrpo.errors import DataError
from dgrpo.verify.detector import LABELS, Detector, Example, build_detector, save_detector


def fit(det: Detector, examples: Sequence[Sequence], *, lr: float = 2e-4, epochs: int = 2, batch_size: int = 8,
        seed: int = 0, log_every: int = 0) -> dict:
    """Train ``det``'s LoRA and head in place on labelled completions.

    Plain AdamW over seeded shuffles; cross-entropy weighted by inverse class frequency
    (w_c = N / (2 N_c)), so an unbalanced set (1,000 honest, 500 poisoned) does not tilt the threshold.

    Args:
        examples: :class:`Example` or (question, completion, label[, set]) tuples; label 1 = poisoned.
        log_every: print the loss every so many steps (0: never).

    Returns:
        Metrics: examples, poisoned, honest, steps, seconds, mean loss of each epoch, the last epoch's
        accuracy at the detector's threshold (each batch scored before its step: no extra pass over the
        data), counts by set and label (also recorded in ``det.meta``).

    Raises:
        DataError: no examples, or not both labels.
    """
    import torch

    rows = [Example(*e) for e in examples]
    labels = [int(r.label) for r in rows]
    check_labels(rows)
    model = det.model
    encoded = [det.encode(r.question, r.completion) for r in rows]
    y = torch.tensor(labels)
    n1 = int(y.sum())
    device = next(model.parameters()).device
    weight = torch.tensor([len(y) / (2 * (len(y) - n1)), len(y) / (2 * n1)], device=device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    start, steps, epoch_loss = time.perf_counter(), 0, []
    model.train()
    threshold = det.meta["threshold"]
    for _ in range(epochs):
        perm, total, correct = torch.randperm(len(rows), generator=gen).tolist(), 0.0, 0
        for b in range(0, len(perm), batch_size):
            idx = perm[b : b + batch_size]
            logits = det.logits([encoded[i] for i in idx])
            target = y[idx].to(device)
            loss = torch.nn.functional.cross_entropy(logits, target, weight=weight)
            flagged = torch.softmax(logits.detach(), -1)[:, 1] >= threshold
            correct += int((flagged.long() == target).sum())
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            total += float(loss.detach()) * len(idx)
            if log_every and steps % log_every == 0:
                print(f"detector step {steps}: loss {float(loss.detach()):.4f} ({time.perf_counter() - start:.0f} s)",
                      flush=True)
        epoch_loss.append(total / len(rows))
    seconds = time.perf_counter() - start
    model.eval()
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        c = counts.setdefault(r.set or "(none)", {"honest": 0, "poisoned": 0})
        c[LABELS[int(r.label)]] += 1
    metrics = {"examples": len(rows), "poisoned": n1, "honest": len(rows) - n1, "steps": steps,
               "seconds": round(seconds, 2), "epoch_loss": [round(v, 6) for v in epoch_loss],
               "last_epoch_accuracy": correct / len(rows)}
    det.meta.update(train={"lr": lr, "epochs": epochs, "batch_size": batch_size, "seed": seed},
                    counts_by_set=counts, metrics=metrics)
    return metrics


def check_labels(rows: Sequence[Example]) -> None:
    """DataError unless ``rows`` hold both labels (names the counts and the fix)."""
    n1 = sum(int(r.label) for r in rows)
    if not rows or n1 in (0, len(rows)):
        raise DataError(f"detector training needs honest and poisoned rows, got {len(rows) - n1} honest and {n1} "
                        f"poisoned; add --data files of the missing label (label: honest|poisoned, or a set "
                        f"named honest*)")


def train_detector(examples: Sequence[Sequence], base_model: str, out_dir: str | Path, *, lora_rank: int = 16,
                   lora_alpha: int = 32, lr: float = 2e-4, epochs: int = 2, batch_size: int = 8,
                   max_length: int = 384, seed: int = 0, threshold: float = 0.5, dtype: str = "float32",
                   device: str = "cpu", log_every: int = 0) -> dict:
    """:func:`build_detector`, :func:`fit` and :func:`save_detector` in one call; returns :func:`fit`'s metrics.

    Args:
        examples: :class:`Example` or (question, completion, label[, set]) tuples; label 1 = poisoned.
        base_model: ``smollm2-135m-instruct``, a local folder or a hub id (as ``model.name``).
        out_dir: where the detector is written (the ``path`` of ``{kind: judge, backend: detector}``).

    Raises:
        PolicyLoadError: the base model cannot be loaded. DataError: no examples, or only one label.
    """
    rows = [Example(*e) for e in examples]
    check_labels(rows)  # before the model loads
    det = build_detector(base_model, lora_rank=lora_rank, lora_alpha=lora_alpha, max_length=max_length,
                         threshold=threshold, seed=seed, dtype=dtype, device=device)
    metrics = fit(det, rows, lr=lr, epochs=epochs, batch_size=batch_size, seed=seed, log_every=log_every)
    save_detector(det, out_dir)
    return metrics
