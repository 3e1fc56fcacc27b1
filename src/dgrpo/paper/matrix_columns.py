"""The columns of ``dgrpo paper matrix``, built and run as a run builds and runs its defenses.

A column is one of:

* ``none``: nothing rejects (the baseline, detection 0 by construction);
* ``validation``: the run's admission on receipt (:mod:`dgrpo.swarm.admission`: signatures, round, seed
  binding, the message checks, ... as the row's ``swarm.protocol`` sets them), run by the matrix on
  everything peer 0 gets (:func:`dgrpo.paper.matrix.admitted`): a message it does not admit is rejected;
* a registered defense kind, by name (``topk``) or by import path (``mypkg.defenses:LengthCap``):
  its config parsed as a run's ``defenses`` are, built by :func:`dgrpo.defenses.build_defense`
  and run alone by :func:`dgrpo.defenses.defend` (the update's logits for a logit-stage defense);
* ``<kind>_bound``: that defense with seed binding (``swarm.protocol.bind_seeds``): a message
  whose claimed seed is not the one assigned to (round, node, prompt, index) is refused too;
* a name of :data:`NOT_FILTERS` (``kl``): listed with no rate.

What a defense needs is declared on its config class (:class:`dgrpo.defenses.DefenseConfig`), not
known here: ``needs_bound_seed`` adds its ``_bound`` column to the defaults, ``group_statistics``
has it judge the attacker's completions inside their whole group (the others judge them alone).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

BASELINE = "none"
RECEIPT = "validation"
BOUND = "_bound"
NOT_FILTERS = {"kl": "β-KL is not a filter: it rejects nothing, it only pulls the update toward the reference"}
# Extra config fields of a defense column at CPU scale (``fields`` of :func:`dgrpo.paper.matrix.run_matrix`):
# SmolLM2-135M answers "No" to every judge prompt in generate mode, so the judge reads its next token's
# yes-share with a threshold (the paper registry's JUDGE, ``dgrpo paper table1``).
CPU_FIELDS: dict[str, dict] = {"judge": {"mode": "logits", "threshold": 0.38}}


@dataclass(frozen=True)
class Column:
    """One column: ``kind`` is the defense it runs (None: none or validation), ``bound`` adds seed
    binding, ``receipt`` the run's admission."""

    name: str
    kind: str | None = None
    bound: bool = False
    receipt: bool = False


def default_columns() -> list[str]:
    """``none``, ``validation``, every registered defense kind (each followed by its ``_bound`` column
    when its config declares ``needs_bound_seed``), then :data:`NOT_FILTERS`."""
    from dgrpo.registry import lookup, names

    out = [BASELINE, RECEIPT]
    for kind in names("defense"):
        out += [kind, kind + BOUND] if lookup("defense", kind).config.needs_bound_seed else [kind]
    return [*out, *NOT_FILTERS]


def parse_column(name: str) -> Column:
    """The column ``name`` stands for.

    Raises:
        ValueError: a name that is neither a built-in column nor a defense kind (the known names listed).
    """
    from dgrpo.errors import UnknownKind
    from dgrpo.registry import lookup

    if name in (BASELINE, *NOT_FILTERS):
        return Column(name)
    if name == RECEIPT:
        return Column(name, receipt=True)
    kind, bound = name, False
    if name.endswith(BOUND) and ":" not in name:
        try:
            lookup("defense", name)
        except UnknownKind:
            kind, bound = name[: -len(BOUND)], True
    try:
        lookup("defense", kind)
    except UnknownKind as err:
        raise ValueError(f"unknown matrix column {name!r} ({err}); columns: {', '.join(default_columns())}, "
                         "a defense named by import path (mypkg.defenses:Name), or <kind>_bound") from None
    return Column(name, kind, bound)


def defense_specs(columns: list[Column], fields: dict[str, dict] | None) -> list[str]:
    """The ``defenses=[...]`` override of a run holding every defense the columns run (each once),
    with its extra ``fields`` (kind → config fields)."""
    kinds = list(dict.fromkeys(c.kind for c in columns if c.kind))
    return ["defenses=" + json.dumps([{"kind": k, **(fields or {}).get(k, {})} for k in kinds])] if kinds else []


class _Scored:
    """A group of an update as :func:`dgrpo.defenses.defend` reads it: its rollouts and the logits of
    the receiver's forward pass (computed once per completions, shared by the columns)."""

    def __init__(self, rollouts: list, logits_of):
        self.rollouts, self._logits_of = rollouts, logits_of

    @property
    def logits(self):
        return self._logits_of(self.rollouts)


def rejections(setup, rollouts: list, group: list, messages: dict, columns: list[Column],
               admitted: set[int]) -> dict[str, list[bool]]:
    """Column name → rejected? per rollout of ``rollouts`` (all of one prompt; ``group`` is the whole
    group they sit in; ``messages``: id of a rollout → its message; ``admitted``: ``id`` of each message
    the receiver's admission let through, :func:`dgrpo.paper.matrix.admitted`).
    Every defense judges alone (not chained), on fresh copies of the rollouts."""
    import torch

    from dgrpo.defenses import defend
    from dgrpo.grpo.learner import Batch
    from dgrpo.policy.sampling import completion_seed
    from dgrpo.policy.scoring import group_logits

    cache: dict[tuple, object] = {}

    def logits_of(judged: list):  # (G, T, V) float32, as the update's forward pass gives them
        key = tuple(tuple(r.completion_ids) for r in judged)
        if key not in cache:
            with torch.no_grad():
                cache[key] = group_logits(setup.policy.model, judged[0].prompt_ids, [r.completion_ids for r in judged],
                                          setup.policy.tokenizer.pad_token_id)
        return cache[key]

    alone: dict[str, list[bool]] = {}

    def judge(kind: str) -> list[bool]:
        defense, config = setup.defenses[kind]
        judged = group if config.group_statistics else rollouts
        fresh = [replace(r, verdicts=[]) for r in judged]
        batch = defend([defense], Batch(fresh, [_Scored(fresh, logits_of)]), {})
        for _ in batch.groups:  # a logit-stage defense judges each group as the update reads it
            pass
        mine = {id(r) for r in rollouts}
        return [not f.accepted for r, f in zip(judged, fresh) if id(r) in mine]

    out: dict[str, list[bool]] = {}
    for c in columns:
        if c.name in NOT_FILTERS:
            continue
        rejected = [False] * len(rollouts)
        if c.receipt:
            rejected = [id(messages[id(r)]) not in admitted for r in rollouts]
        if c.kind is not None:
            if c.kind not in alone:
                alone[c.kind] = judge(c.kind)
            rejected = alone[c.kind]
        if c.bound:
            rejected = [rej or r.seed != completion_seed(setup.cfg.seed, r.key[1], r.key[0], r.key[2], r.key[3])
                        for rej, r in zip(rejected, rollouts)]
        out[c.name] = rejected
    return out
