"""``dgrpo paper matrix``: every attack against every applicable defense, on one round's messages.

For each attack (:data:`ATTACKS`, ``dgrpo run`` overrides per row) the attacker (node 3 of 4) writes
its messages for one round with the weights every honest node holds; every column (defense)
judges them alone (not chained). An honest pool of ``n_honest`` completions,
sampled with the swarm's seeded sampling under the assigned seeds, gives each defense's
false-positive rate. Rates carry Wilson 95% intervals (:func:`dgrpo.metrics.intervals.wilson`).

Groups: horizontal attackers own G/2 slots of each group (c = G/2, the peak of the poisoned
advantage, Fig. 8), the other G/2 are the honest pool's completions of the same prompt; vertical
attackers own whole groups (c = G/2 poisoned, G/2 deliberately wrong, §3.4.1). Detection counts
completions labelled ``poisoned`` only (not the attacker's filler).

Messages are built, routed and admitted as an in-process run does (:func:`row_swarm`: a
:class:`~dgrpo.swarm.swarm.Swarm` of the row's config, its protocol built by
:func:`dgrpo.training.build.in_process_protocol`): the attacker writes through ``Swarm.write`` (its
:class:`~dgrpo.types.AttackContext`, with the length rule where ``swarm.protocol.enforce_length`` is on;
every message signed), a protocol attacker chooses what peer 0 gets through its own ``send``
(``Swarm.route``), and peer 0 admits what it gets through the run's admission rules (``Swarm.receive``,
:mod:`dgrpo.swarm.admission`): the ``validation`` column is what that admission refuses or drops. The
matrix's config turns two rules off (:data:`MATRIX_PROTOCOL`): the length rule, so the attackers send the
paper's unshortened poisons, and the slot rules (``enforce_shares``: share, flood), whose schedule is not
the matrix's (its attacker holds G/2 slots of each group); a row's ``attack_overrides`` may turn them on.

Columns (:mod:`dgrpo.paper.matrix_columns`): ``none``, ``validation`` (the run's admission on receipt),
every registered defense kind (:func:`~dgrpo.paper.matrix_columns.default_columns`, or any named by
import path), built from its config and run by :func:`dgrpo.defenses.defend` as a run does, and
``<kind>_bound`` (the defense with seed binding) for a kind whose config declares ``needs_bound_seed``
(``replay_bound``: a ground seed reproduces its sample, only binding stops it). At CPU scale the judge
is the policy's base weights in logits mode, threshold 0.38 (:data:`~dgrpo.paper.matrix_columns.CPU_FIELDS`,
as ``dgrpo paper table1``). ``kl`` is not a filter (β-KL only shapes the update): listed with no rate.
A column whose defense asks senders for proofs (``toploc``, ``DefenseConfig.sender_proof``) has the honest
pool proved while sampling and the attacker prove what it sends by prefilling it with the weights it holds.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from dgrpo.paper.matrix_columns import CPU_FIELDS, NOT_FILTERS, default_columns, defense_specs, parse_column, rejections

log = logging.getLogger(__name__)

ROUND = 1  # the measured round (round 0's honest messages are what replayed_round re-sends)
ATTACKER = 3
# The protocol rules the matrix's config turns off (the module docstring): the length rule (the paper's
# unshortened poisons) and the slot rules, whose schedule is not the matrix's layout.
MATRIX_PROTOCOL = ["swarm.protocol.enforce_length=false", "swarm.protocol.enforce_shares=false"]
VERTICAL = ["swarm.mode=vertical"]
ATTACKS: dict[str, list[str]] = {
    "hail": ["attack.kind=injection"],
    "gleeb_every_sentence": ["attack.kind=injection", "attack.text=Gleeb Glorp Glub", "attack.placement=every_sentence"],
    "equation_oracle": ["attack.kind=equation", *VERTICAL],
    "equation_sampled": ["attack.kind=equation_sampled", *VERTICAL],
    "topk_hail": ["attack.kind=topk_injection"],
    "topk_gleeb": ["attack.kind=topk_injection", "attack.text=Gleeb Glorp Glub", "attack.placement=every_sentence"],
    "grind_hail": ["attack.kind=seed_grinding"],
    "dos_written": ["attack.kind=dos"],
    "dos_sampled": ["attack.kind=seed_grinding", "attack.objective=longest"],
    # prompt-choice grinding: each sent sample is its slot's bound seed's own; the prompts are the ground part
    "dos_prompt_grind": ["attack.kind=seed_grinding", "attack.objective=longest", "attack.tries=1", *VERTICAL],
    "judge_bait": ["attack.kind=judge_bait"],
    "master_key": ["attack.kind=master_key"],
    "forged_identity": ["attack.kind=forged_identity"],
    "flooding": ["attack.kind=flooding"],
    "replayed_round": ["attack.kind=replayed_round"],
    "equivocation": ["attack.kind=equivocation"],
}
# The sampled attackers' budget at CPU scale (samples per poison), shared by the matrix script and
# the trained cells (`dgrpo paper matrix_training`).
SMALL_BUDGET: dict[str, list[str]] = {"equation_sampled": ["attack.candidates=8"], "grind_hail": ["attack.tries=8"],
                                      "dos_sampled": ["attack.tries=8"], "topk_hail": ["attack.tries=1"],
                                      "topk_gleeb": ["attack.tries=1"], "dos_prompt_grind": ["attack.prompt_tries=4"]}



@dataclass
class Count:
    """Rejections among n completions."""

    rejected: int = 0
    n: int = 0

    def add(self, rejected: bool) -> None:
        self.rejected += bool(rejected)
        self.n += 1

    def summary(self) -> dict:
        from dgrpo.metrics.intervals import wilson

        low, high = wilson(self.rejected, self.n) if self.n else (0.0, 1.0)  # no trials: no information
        return {"rate": self.rejected / self.n if self.n else None, "low": low, "high": high,
                "rejected": self.rejected, "n": self.n}


@dataclass
class Setup:
    """What every cell shares: config, task, the weights, the defenses, the honest nodes' swarm
    (:func:`row_swarm`: their signatures and peer 0's admission) and the honest pool."""

    cfg: object
    task: object
    policy: object
    defenses: dict  # kind → (defense, its config)
    problems: dict
    swarm: object = None
    honest: dict = field(default_factory=dict)  # prompt id → honest rollouts (G)
    honest_messages: dict = field(default_factory=dict)  # message key → message


def _config(model: str, seed: int, max_new_tokens: int, extra: list[str]):
    from dgrpo.config import load_config

    return load_config(None, [f"model.name={model}", f"seed={seed}", f"sampling.max_new_tokens={max_new_tokens}",
                              "model.device=cpu", *MATRIX_PROTOCOL,
                              *(["swarm.malicious=[3]"] if any(o.startswith("attack.") for o in extra) else []), *extra])


def _columns(names) -> list:
    return [parse_column(n) for n in names]


def _rollout(setup: Setup, msg, label: str):
    from dgrpo.types import Rollout

    problem = setup.problems[msg.prompt_id]
    return Rollout(msg.prompt_id, setup.policy.prompt_ids(setup.task, problem), list(msg.token_ids), msg.text,
                   msg.node, msg.seed, label=label, key=msg.key, proof=msg.proof)


def _prover(setup: Setup):
    """The TOPLOC proof parameters when a column's defense asks senders for proofs (``toploc``), else None."""
    return next((p for _, c in setup.defenses.values() if (p := c.sender_proof()) is not None), None)


def row_swarm(setup: Setup, cfg, attack=None):
    """The swarm of ``cfg`` as an in-process run hosts it: honest nodes 0..2 and, with ``attack``, the
    attacker (node 3), all holding the setup's weights; the protocol of ``cfg.swarm.protocol`` with fresh
    keys (:func:`dgrpo.training.build.in_process_protocol`); the senders' proofs where a column's defense
    asks for them. No learner and no defenses: the columns run those alone."""
    from dgrpo.swarm.swarm import Swarm
    from dgrpo.swarm.validation import Limits
    from dgrpo.training.build import in_process_protocol

    swarm = Swarm(setup.task, {n: setup.policy for n in range(ATTACKER)}, {ATTACKER: attack} if attack is not None else {},
                  {ATTACKER: setup.policy} if attack is not None else {}, {}, {}, cfg.seed, cfg.swarm.group_size,
                  Limits.for_completions(cfg.sampling.max_new_tokens), cfg.swarm.mode,
                  in_process_protocol(cfg, setup.task, "matrix"))
    swarm.prover = _prover(setup)
    return swarm


def admitted(swarm, policy, messages: list) -> set[int]:
    """``id`` of each of ``messages`` that peer 0's admission (``Swarm.receive``, one receive of them all,
    as a run's) turns into a rollout; the others are refused or dropped (a copy, a flood)."""
    return {id(m) for m in swarm.receive(policy, messages, ROUND).admitted}


def _reward(setup: Setup, rollouts: list) -> None:
    from dgrpo.tasks.base import reward_rollouts  # the run's reward step (Swarm.reward)

    reward_rollouts(setup.task, setup.problems, rollouts)


def _honest_messages(setup: Setup, problems, round_idx: int, indices: range, sign=None) -> list:
    """Honest messages (nodes 0..2 by index) for ``problems``, sampled under their assigned seeds, each
    signed by ``sign`` (a swarm's ``sign``; default the setup swarm's)."""
    from dgrpo.policy.sampling import completion_seed
    from dgrpo.types import Message

    requests = [(p, i, i % ATTACKER) for p in problems for i in indices]
    seeds = [completion_seed(setup.cfg.seed, round_idx, node, p.prompt_id, i) for p, i, node in requests]
    out, prover, sign = [], _prover(setup), sign or setup.swarm.sign
    for start in range(0, len(requests), 64):
        chunk = requests[start:start + 64]
        asked = [p for p, _, _ in chunk]
        results = (setup.policy.generate_proved(setup.task, asked, seeds[start:start + 64], prover) if prover else
                   [(ids, text, "") for ids, text in setup.policy.generate(setup.task, asked, seeds[start:start + 64])])
        for (p, i, node), seed, (ids, text, proof) in zip(chunk, seeds[start:start + 64], results):
            out.append(sign(Message(node, round_idx, p.prompt_id, i, text, tuple(ids), seed, setup.policy.tokenizer_id,
                                    proof=proof)))
        log.info("matrix: %d/%d honest completions of round %d sampled", len(out), len(requests), round_idx)
    return out


def build_setup(model: str, seed: int, max_new_tokens: int, names: list[str], fields: dict[str, dict] | None = None) -> Setup:
    """Load the weights once and build the defenses of the columns ``names`` as a run builds its own
    (one run config holding all of them, :func:`dgrpo.training.build.build_policy` and
    :func:`dgrpo.defenses.build_defense`); ``fields``: kind → extra config fields."""
    from dgrpo.defenses import build_defense
    from dgrpo.training.build import build_policy, build_task

    cfg = _config(model, seed, max_new_tokens, defense_specs([parse_column(n) for n in names], fields))
    task = build_task(cfg)
    policy, _ = build_policy(cfg.model, cfg, trainable=False)
    defenses = {d.kind: (build_defense(d, cfg, policy, task), d) for d in cfg.defenses}
    problems = {p.prompt_id: p for p in task.train}  # the training pool: a held-out prompt is no valid message
    setup = Setup(cfg, task, policy, defenses, problems)
    setup.swarm = row_swarm(setup, cfg)
    return setup


def honest_pool(setup: Setup, n_honest: int, names: list[str]) -> dict[str, dict]:
    """Sample the honest pool (⌈n/G⌉ prompts × G) and measure every defense's false positives on it."""
    G = setup.cfg.swarm.group_size
    problems = [setup.task.train[i % len(setup.task.train)] for i in range(math.ceil(n_honest / G))]
    problems = list({p.prompt_id: p for p in problems}.values())
    msgs = _honest_messages(setup, problems, ROUND, range(G))
    counts = {n: Count() for n in names if n not in NOT_FILTERS}
    by_prompt: dict[str, list] = {}
    lookup, passed = {}, admitted(setup.swarm, setup.policy, msgs)
    for m in msgs:
        r = _rollout(setup, m, "honest")
        lookup[id(r)] = m
        by_prompt.setdefault(m.prompt_id, []).append(r)
    for k, (pid, group) in enumerate(by_prompt.items()):
        if k % 25 == 0:
            log.info("matrix: honest group %d/%d checked", k, len(by_prompt))
        _reward(setup, group)
        for name, rejected in rejections(setup, group, group, lookup, _columns(counts), passed).items():
            for x in rejected:
                counts[name].add(x)
    setup.honest = by_prompt
    setup.honest_messages = {m.key: m for m in msgs}
    return {n: c.summary() for n, c in counts.items()}


def pool_digest(messages) -> str:
    """SHA-256 of the honest pool (every message's key and token ids, in key order): two calls of the
    matrix drew the same pool exactly when their digests agree (:func:`dgrpo.paper.matrix_report.merge_rows`)."""
    import hashlib

    h = hashlib.sha256()
    for m in sorted(messages, key=lambda m: m.key):
        h.update(repr((m.key, tuple(m.token_ids))).encode())
    return h.hexdigest()


def _attack_messages(setup: Setup, overrides: list[str], n_poisoned: int):
    """The attacker's messages of one round as peer 0 receives them, their labels and admission (by
    ``id``), the attack and its slots. The row's swarm (:func:`row_swarm`) writes them
    (``Swarm.write``); a protocol attacker (``routes``) chooses what peer 0 gets (``Swarm.route``: its
    ``send``, re-signed with its key), with the last round's honest messages as its replay memory when
    it declares ``wants_seen``; peer 0 admits them in one receive (:func:`admitted`)."""
    from dgrpo.attacks import build_attack
    from dgrpo.types import Slot

    cfg = _config(setup.cfg.model.name, setup.cfg.seed, setup.cfg.sampling.max_new_tokens, overrides)
    attack = build_attack(cfg.attack, cfg)
    swarm = row_swarm(setup, cfg, attack)
    G, mode = cfg.swarm.group_size, cfg.swarm.mode
    n_groups = math.ceil(n_poisoned / (G // 2))
    if mode == "vertical":
        ctx = swarm.attack_context(ATTACKER, ROUND)
        slots = [Slot(p, G, 0) for p in attack.choose_prompts(setup.task.train, n_groups, cfg.seed, ROUND, ATTACKER, ctx=ctx)]
    else:
        pool = [setup.problems[pid] for pid in setup.honest]
        if len(pool) < n_groups:
            raise ValueError(f"n_poisoned={n_poisoned} needs {n_groups} honest groups; raise n_honest to {n_groups * G}")
        slots = [Slot(p, G // 2, G // 2) for p in pool[:n_groups]]
    sent = swarm.write({ATTACKER: slots}, ROUND).get(ATTACKER, [])
    if attack.routes:
        if attack.wants_seen:  # what the run's replay memory holds: last round's gathered messages
            seen = _honest_messages(setup, [s.problem for s in slots], ROUND - 1, range(G // 2), swarm.sign)
            swarm.restore_replay_memory(ROUND - 1, seen)
        sent = swarm.route(sent, 0, ROUND)
    labels = {id(m): swarm.label(m) for m in sent}
    return sent, labels, admitted(swarm, setup.policy, sent), attack, slots


def measure_attack(setup: Setup, overrides: list[str], n_poisoned: int, names: list[str]) -> dict:
    """Detection rate of every defense on one attack's poisoned completions, and what they earn."""
    start = time.perf_counter()
    sent, labels, passed, attack, slots = _attack_messages(setup, overrides, n_poisoned)
    G = setup.cfg.swarm.group_size
    counts = {n: Count() for n in names if n not in NOT_FILTERS}
    rewards, by_prompt, lookup = [], {}, {}
    for m in sent:
        r = _rollout(setup, m, labels[id(m)])
        lookup[id(r)] = m
        by_prompt.setdefault(m.prompt_id, []).append(r)
    for pid, mine in by_prompt.items():
        mates = setup.honest.get(pid, [])[: G // 2] if slots[0].count < G else []
        group = [*mates, *mine]
        _reward(setup, group)
        verdicts = rejections(setup, mine, group, lookup, _columns(counts), passed)
        for j, r in enumerate(mine):
            if r.label != "poisoned":
                continue
            rewards.append(r.reward)
            for name, rejected in verdicts.items():
                counts[name].add(rejected[j])
    stats = dict(attack.stats)
    return {"detection": {n: c.summary() for n, c in counts.items()}, "poisoned": len(rewards),
            "full_reward": sum(x >= 1.0 for x in rewards) / len(rewards) if rewards else None,
            "stats": stats, "seconds": round(time.perf_counter() - start, 1)}


def run_matrix(out_dir, model: str = "smollm2-135m-instruct", n_honest: int = 1000, n_poisoned: int = 200,
               attacks: list[str] | None = None, defenses: list[str] | None = None, seed: int = 0,
               max_new_tokens: int = 64, fields: dict[str, dict] | None = None, threads: int | None = None,
               attack_overrides: dict[str, list[str]] | None = None) -> dict:
    """Measure the matrix into ``out_dir``: ``matrix.json`` (written after every attack, so an
    interrupted run keeps what it measured), ``table.md`` and ``matrix.png``.

    Args:
        attacks: row names of :data:`ATTACKS` (None = all).
        defenses: column names (None = :func:`~dgrpo.paper.matrix_columns.default_columns`; a defense
            kind by name or import path, ``<kind>_bound``, ``none``, ``validation``, ``kl``).
        fields: defense kind → extra config fields, over :data:`~dgrpo.paper.matrix_columns.CPU_FIELDS`
            (e.g. ``{judge: {model: <hub id>}}``).
        attack_overrides: row name → extra overrides of that row (e.g. ``{topk_hail: [attack.tries=1]}``).

    Raises:
        ValueError: an unknown attack or column name, an ``attack_overrides`` row that is not a row, or a
            ``fields`` kind that no selected column runs.
    """
    from dgrpo.paper.matrix_report import write_outputs

    if threads:
        import torch

        torch.set_num_threads(threads)
    def names_of(x, default: list[str]) -> list[str]:  # "hail" and "hail,topk_hail" as well as [hail, topk_hail]
        x = default if x is None else [a.strip() for a in x.split(",") if a.strip()] if isinstance(x, str) else x
        return [str(a) for a in x]

    attacks, names = names_of(attacks, list(ATTACKS)), names_of(defenses, default_columns())
    bad = [a for a in attacks if a not in ATTACKS]
    if bad or not attacks or not names:
        raise ValueError(f"unknown matrix rows/columns {bad or 'none given'}; attacks: {', '.join(ATTACKS)}; "
                         f"defenses: {', '.join(default_columns())}")
    kinds = sorted({c.kind for c in _columns(names) if c.kind})  # an unknown column: refused here, before loading
    stray = sorted(set(fields or {}) - set(kinds))
    if stray:  # a misspelt or unselected kind would run its column with the defaults, silently
        raise ValueError(f"fields names {stray}, which no column of this matrix runs; set fields for the "
                         f"columns' defense kinds: {', '.join(kinds) or 'none'}")
    fields = {**CPU_FIELDS, **{k: {**CPU_FIELDS.get(k, {}), **v} for k, v in (fields or {}).items()}}
    unknown = sorted(set(attack_overrides or {}) - set(ATTACKS))
    if unknown:  # a misspelt row would drop its override silently
        raise ValueError(f"attack_overrides names unknown rows {unknown}; rows: {', '.join(ATTACKS)}")
    for a in attacks:  # every row's config checked before the honest pool is sampled (minutes), not after
        _config(model, seed, max_new_tokens, [*ATTACKS[a], *(attack_overrides or {}).get(a, [])])
    G = _config(model, seed, max_new_tokens, []).swarm.group_size
    need = math.ceil(n_poisoned / (G // 2)) * G  # horizontal rows: G/2 poisoned beside G/2 honest of each group
    horizontal = [a for a in attacks if "swarm.mode=vertical" not in ATTACKS[a]]
    if horizontal and n_honest < need:  # checked before the honest pool is sampled, not after
        raise ValueError(f"n_poisoned={n_poisoned} in the horizontal rows ({', '.join(horizontal)}) needs "
                         f"{need // G} honest groups of {G}: raise n_honest to {need}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    setup = build_setup(model, seed, max_new_tokens, names, fields)
    t0 = time.perf_counter()
    result = {"model": model, "seed": seed, "max_new_tokens": max_new_tokens, "round": ROUND,
              "group_size": setup.cfg.swarm.group_size, "top_k": setup.cfg.sampling.top_k, "defenses": names,
              "not_filters": {n: NOT_FILTERS[n] for n in names if n in NOT_FILTERS},
              "honest": honest_pool(setup, n_honest, names), "attacks": {}}
    result["honest_digest"] = pool_digest(setup.honest_messages.values())
    result["honest_seconds"] = round(time.perf_counter() - t0, 1)
    log.info("matrix: honest pool measured in %.0f s", result["honest_seconds"])
    for name in attacks:
        overrides = [*ATTACKS[name], *(attack_overrides or {}).get(name, [])]
        result["attacks"][name] = {"overrides": overrides, **measure_attack(setup, overrides, n_poisoned, names)}
        log.info("matrix: %s measured in %.0f s", name, result["attacks"][name]["seconds"])
        write_outputs(result, out)
    write_outputs(result, out)
    return result
