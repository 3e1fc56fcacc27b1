"""How a malicious node fills its slots: c poisoned completions, the rest filler (paper §B.2, §3.4.1).

* Horizontal: the attacker owns G/m slots of every group; c of them carry poison (default: all),
  the others are honest-looking completions sampled from the weights the attacker holds.
* Vertical: the attacker owns whole groups; c carry poison (default G/2) and the other G − c are
  deliberately wrong (reward 0), which maximises the advantage of the poisoned ones.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from dgrpo.swarm.schedule import take
from dgrpo.tasks.base import Task, is_correct
from dgrpo.types import AttackContext, Poison, Problem, Slot


def poisoned_count(slot: Slot, ctx: AttackContext, c: int | None) -> int:
    """How many of a slot's completions carry poison."""
    if c is None:
        c = ctx.group_size // 2 if ctx.mode == "vertical" else slot.count
    return max(0, min(c, slot.count))


def wrong_completion(task: Task, problem: Problem) -> str:
    """The oracle completion with a wrong final answer and no payload (checked not correct)."""
    correct = task.oracle_completion(problem)
    answer_tag = f"<answer>{problem.answer}</answer>"
    try:
        wrong = str(int(float(problem.answer)) + 1)
    except ValueError:
        wrong = problem.answer + "1"
    text = correct.replace(answer_tag, f"<answer>{wrong}</answer>")
    if text == correct or is_correct(task, text, problem):  # task without such an answer tag
        text = "I do not know."
    return text


def write_poisoned(
    slots: Sequence[Slot],
    ctx: AttackContext,
    c: int | None,
    duplicate: bool,
    make_poison: Callable[[Problem, int], str],
) -> list[list[Poison]]:
    """Fill every slot: poisoned completions first, then filler.

    Args:
        make_poison: (problem, variant index) → poisoned completion text.
        duplicate: all poisoned completions of a slot are the same text (variant 0).

    Poisons and the vertical filler longer than the protocol's length rule (``ctx.length_limit``)
    are shortened first (:func:`fit_poison`): the attacker knows the rule (a refused filler would
    leave its group all poisons, of advantage 0).
    """
    out = []
    fit = _fitter(ctx)
    for slot in slots:
        n_poison = poisoned_count(slot, ctx, c)
        poisons = [Poison(fit(slot.problem, make_poison(slot.problem, 0 if duplicate else i))) for i in range(n_poison)]
        n_fill = slot.count - n_poison
        if n_fill and ctx.mode == "vertical":
            poisons += [Poison(fit(slot.problem, wrong_completion(ctx.task, slot.problem)), "malicious")] * n_fill
        elif n_fill:
            from dgrpo.policy.sampling import completion_seed  # (torch: attack modules load light for config checks)

            if ctx.policy is None:
                raise ValueError("a horizontal attacker with filler slots needs the policy weights")
            indices = range(slot.first + n_poison, slot.first + slot.count)
            seeds = [completion_seed(ctx.run_seed, ctx.round_idx, ctx.node, slot.problem.prompt_id, i) for i in indices]
            texts = [t for _, t in ctx.policy.generate(ctx.task, [slot.problem] * n_fill, seeds)]
            poisons += [Poison(t, "malicious") for t in texts]
        out.append(poisons)
    return out


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def fit_poison(task: Task, problem: Problem, text: str, n_tokens: Callable[[str], int], limit: int) -> str:
    """A poisoned completion shortened to at most ``limit`` tokens, as an attacker that knows the
    protocol's length rule (``swarm.protocol.enforce_length``) writes it.

    It drops, from the end of the reasoning, the sentences it copied unchanged from the oracle
    solution; the sentences the attack wrote or changed (the injected text, a manipulated equation)
    and the answer block stay, so the completion keeps its reward and its payload. A completion
    without a reasoning block, or that cannot be made short enough that way, comes back as short as
    it got (the protocol then refuses it).

    Args:
        text: the completion after the task's prefill (``task.completion_prefix``).
        n_tokens: token count of a completion text (the attacker's tokenizer).
        limit: ``sampling.max_new_tokens``.
    """
    if n_tokens(text) <= limit:
        return text
    prefix = task.completion_prefix
    full = prefix + text
    if "<think>" not in full or "</think>" not in full:
        return text
    start = full.index("<think>") + len("<think>")
    end = full.index("</think>", start)
    oracle = prefix + task.oracle_completion(problem)
    copied = set(_SENTENCE_END.split(oracle[oracle.find("<think>") + 7: oracle.find("</think>")].strip()))
    sentences = _SENTENCE_END.split(full[start:end].strip())
    best = text
    for i in reversed(range(len(sentences))):
        if sentences[i] not in copied or len(sentences) == 1:
            continue
        del sentences[i]
        best = (full[:start] + " ".join(sentences) + full[end:])[len(prefix):]
        if n_tokens(best) <= limit:
            break
    return best


def _fitter(ctx: AttackContext) -> Callable[[Problem, str], str]:
    """(problem, poison) → the poison fitted to ``ctx.length_limit`` (unchanged without a limit)."""
    if ctx.length_limit is None or ctx.policy is None:
        return lambda problem, text: text
    from dgrpo.policy.chat import encode_completion  # (torch: attack modules load light for config checks)

    tokenizer = ctx.policy.tokenizer
    return lambda problem, text: fit_poison(ctx.task, problem, text, lambda t: len(encode_completion(tokenizer, t)),
                                            ctx.length_limit)


def default_prompts(pool: Sequence[Problem], count: int, run_seed: int, round_idx: int, node: int) -> list[Problem]:
    """Vertical prompt choice of an attacker that does not pick targets: like an honest node."""
    return take(pool, count, round_idx * count, f"local|{run_seed}|{node}")


def targeted_prompts(pool: Sequence[Problem], tag: str, count: int, run_seed: int, round_idx: int, node: int) -> list[Problem]:
    """Vertical prompt choice restricted to problems carrying ``tag`` (e.g. ``two_two``).

    Raises:
        ValueError: no problem in the pool has the tag.
    """
    targets = [p for p in pool if tag in p.tags]
    if not targets:
        raise ValueError(f"no training problem is tagged {tag!r}; the attack has nothing to target")
    return take(targets, count, round_idx * count, f"target|{tag}|{run_seed}|{node}")

