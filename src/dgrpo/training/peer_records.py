"""What the main process takes from a reporting node's round record, and the rules a record must pass.

In a heterogeneous swarm every live node declared honest reports its own record of the round (``rec{r}``,
:func:`dgrpo.training.records.share_record`); the main process merges them into ``metrics.jsonl``. A node's role
is self-declared, so an attacker that declares itself honest reports too, and its record is a value the attacker
chose (review r31f H7: a record of ``[]`` crashed every honest main in turn). So the main parses each peer's bytes
with :class:`PeerRecord` (pydantic, strict: no coercion, no NaN or infinity where a finite number is due) and
checks it against its own record of the same round (:func:`parse_peer_record`); a record that fails is refused
with one reason (:class:`RecordRefused`), named in ``peers.jsonl`` under its sender, and the round's record goes
on without it. It never raises anything else.

What the main trusts from a peer's record (everything else in it is dropped unread):

==========================  ============================================  ==========================================
key                         used as                                       rule
==========================  ============================================  ==========================================
``round``                   —                                             the main's round
``train/loss``,             ``…/node{k}``: node k's own statistics        a number (loss: any; grad_norm ≥ 0);
``train/grad_norm``,                                                      ``used``: an integer, 0 ≤ used ≤ the
``train/used``                                                            round's ``swarm/messages``
``time/reward``,            ``…/node{k}``                                 finite, ≥ 0; defense names the main's own
``time/defense(/<name>)``
``swarm/invalid``           summed over the reporting nodes               integer, 0 ≤ n ≤ the round's messages
``eval/<rate>`` (accuracy,  averaged over the reporting nodes; the        in [0, 1] and a whole number of
format_rate, greedy/…)      accuracy also as ``eval/accuracy/node{k}``    completions out of ``eval/n``
``eval/completion_tokens``  averaged                                      0 ≤ x ≤ ``sampling.max_new_tokens``
(and greedy)
``eval/kl_to_start``        averaged                                      ``|x| ≤ MAX_MEAN`` (10^6 nats per token:
                                                                          a Monte Carlo estimate, honestly ~0 ± noise
                                                                          at the start, so either sign)
``eval/entropy``            averaged                                      ``0 ≤ x ≤ MAX_ENTROPY`` (ln 2^32 nats: a
                                                                          softmax over at most 2^32 tokens)
``eval/n``                  summed                                        equal to the main's own (same prompts)
(every summed or averaged   —                                             never JSON null: absent, or a number
key above)
``attack/<metric>``         averaged (None left out)                      the main's keys exactly; 0 ≤ x ≤
                                                                          ``MAX_MEAN``; ``asr…`` and ``…rate`` ≤ 1
==========================  ============================================  ==========================================

An evaluation round is one for every node (same config): a record must carry the evaluation keys the main's
carries, and none when the main's has none.

Every averaged number is bounded, so that the mean of any number of reporters is finite (before, two colluding
reporters posting ``"eval/entropy": 1e308`` made ``statistics.fmean`` raise OverflowError in every honest main):
rates by 1, token counts by ``max_new_tokens``, the entropy by the entropy of a uniform softmax over 2^32 tokens
(no model's vocabulary comes near: Qwen2.5 has 151,936 rows), and the KL estimate and the non-rate attack metrics
(a count or a length per completion: ``filler_repeats``, ``mean_chars``) by ``MAX_MEAN`` = 10^6, far above any
honest value, so that even a sum over 10^300 reporters stays below the largest float (1.8 × 10^308). A value out of
its range is refused like any other (``record: eval/entropy: Input should be less than or equal to 22.18…``).

What these rules cannot catch: a record that is well formed and lies within them (an attacker reporting an
accuracy of 1.0 or an ASR of 0.0 for its own policy). The main cannot check another node's evaluation without
its weights; so the pooled ``eval/*`` and ``attack/*`` means of a heterogeneous swarm are means of what each
reporting node says of itself, and a liar among ``k`` reporters moves them by at most ``1/k`` of the range. The
per-node ``eval/accuracy/node{k}`` is logged beside the mean, so such a node stands out, and the honest nodes'
own numbers are never changed by it (docs/distributed.md, "Metrics").
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dgrpo.training.evaluate import EVAL_MEANS, RATES

MAX_RECORD_BYTES = 1 << 18  # bytes: an honest record is a few kB (tens of keys); a larger one is refused unread
MAX_NAMED_KEYS = 64  # ``time/defense/*`` and ``attack/*`` keys each (the config's defenses and attack metrics)
MAX_ENTROPY = math.log(2**32)  # nats (22.18): the entropy of a uniform softmax over 2^32 tokens, above any model's
MAX_MEAN = 1e6  # the KL estimate's magnitude (nats per token) and a non-rate attack metric: far above honest values

NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Entropy = Annotated[float, Field(ge=0, le=MAX_ENTROPY, allow_inf_nan=False)]
Estimate = Annotated[float, Field(ge=-MAX_MEAN, le=MAX_MEAN, allow_inf_nan=False)]  # a signed mean (KL estimate)
Bounded = Annotated[float, Field(ge=0, le=MAX_MEAN, allow_inf_nan=False)]


class RecordRefused(ValueError):
    """A peer's round record was refused; the message is the one-line reason (``record: …``)."""


class PeerRecord(BaseModel):
    """The part of a reporting node's round record the main merges (see the module's table), parsed strictly.

    ``defense_times`` holds the ``time/defense/<name>`` keys by name, ``attack`` the ``attack/<metric>`` keys by
    metric; the other fields are the keys named by their aliases. Unknown keys are ignored (not merged)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    round: Count
    loss: float | None = Field(None, alias="train/loss")  # (a diverged honest update may say NaN: its own number)
    grad_norm: Annotated[float, Field(ge=0)] | None = Field(None, alias="train/grad_norm")
    used: Count | None = Field(None, alias="train/used")
    reward_s: NonNeg | None = Field(None, alias="time/reward")
    defense_s: NonNeg | None = Field(None, alias="time/defense")
    defense_times: dict[str, NonNeg] = Field(default_factory=dict, max_length=MAX_NAMED_KEYS)
    # The keys merge_records sums or averages: absent is allowed (the field stays unset), JSON null is not (review
    # r31g J1: a null accuracy passed and fmean raised TypeError in every honest main); the None default is never
    # validated and never dumped (merged_keys excludes unset fields).
    invalid: Count = Field(None, alias="swarm/invalid")
    accuracy: Rate = Field(None, alias="eval/accuracy")
    format_rate: Rate = Field(None, alias="eval/format_rate")
    greedy_accuracy: Rate = Field(None, alias="eval/greedy/accuracy")
    greedy_format_rate: Rate = Field(None, alias="eval/greedy/format_rate")
    completion_tokens: NonNeg = Field(None, alias="eval/completion_tokens")
    greedy_completion_tokens: NonNeg = Field(None, alias="eval/greedy/completion_tokens")
    kl_to_start: Estimate = Field(None, alias="eval/kl_to_start")
    entropy: Entropy = Field(None, alias="eval/entropy")
    n: Annotated[int, Field(ge=1)] = Field(None, alias="eval/n")
    attack: dict[str, Bounded | None] = Field(default_factory=dict, max_length=MAX_NAMED_KEYS)

    @model_validator(mode="before")
    @classmethod
    def _named_keys(cls, data: Any) -> Any:
        """Gather ``time/defense/<name>`` and ``attack/<metric>`` into their dicts (a record must be a JSON object)."""
        if not isinstance(data, dict):
            kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(data), "null")
            raise ValueError(f"not a JSON object but a JSON {kind}")
        out = {k: v for k, v in data.items() if not k.startswith(("time/defense/", "attack/"))}
        out["defense_times"] = {k.removeprefix("time/defense/"): v for k, v in data.items() if k.startswith("time/defense/")}
        out["attack"] = {k.removeprefix("attack/"): v for k, v in data.items() if k.startswith("attack/")}
        return out

    def merged_keys(self) -> dict:
        """The record as :func:`dgrpo.training.records.merge_records` reads it: trusted keys only, by their names."""
        out = self.model_dump(by_alias=True, exclude_unset=True, exclude={"defense_times", "attack"})
        out.update({f"time/defense/{k}": v for k, v in self.defense_times.items()})
        out.update({f"attack/{k}": v for k, v in self.attack.items()})
        return out


def _check(peer: PeerRecord, mine: dict, max_new_tokens: int) -> None:
    """Raise ValueError (one line) where ``peer`` disagrees with the main's own record ``mine`` of the round or with
    the config (``max_new_tokens``: ``sampling.max_new_tokens``)."""
    got = peer.merged_keys()
    if peer.round != mine.get("round"):
        raise ValueError(f"round is {peer.round}, not {mine.get('round')}")
    messages = mine.get("swarm/messages")
    for key in ("swarm/invalid", "train/used"):
        if isinstance(messages, int) and got.get(key) is not None and got[key] > messages:
            raise ValueError(f"{key}={got[key]} exceeds the round's {messages} messages")
    extra = {k for k in got if k.startswith("time/defense/")} - set(mine)
    if extra:
        raise ValueError(f"times of defenses the config does not run: {sorted(extra)[:4]}")
    evaluated = "eval/accuracy" in mine
    theirs = {k for k in got if k.startswith(("eval/", "attack/"))}
    want = {k for k in mine if k in (*EVAL_MEANS, "eval/n") or k.startswith("attack/")} if evaluated else set()
    if theirs != want:
        what = "this round is evaluated" if evaluated else "this round is not evaluated"
        raise ValueError(f"{what}, but its evaluation keys differ from the main's: missing "
                         f"{sorted(want - theirs)[:4]}, unexpected {sorted(theirs - want)[:4]}")
    if not evaluated:
        return
    if peer.n != mine.get("eval/n"):
        raise ValueError(f"eval/n={peer.n}, but every node evaluates the same {mine.get('eval/n')} prompts")
    for key in RATES:
        if got.get(key) is not None and abs(got[key] * peer.n - round(got[key] * peer.n)) > 1e-6 * peer.n:
            raise ValueError(f"{key}={got[key]!r} is no whole number of completions out of eval/n={peer.n}")
    for key in ("eval/completion_tokens", "eval/greedy/completion_tokens"):
        if got.get(key) is not None and got[key] > max_new_tokens:
            raise ValueError(f"{key}={got[key]!r} exceeds sampling.max_new_tokens={max_new_tokens}")
    for name, value in peer.attack.items():
        if value is not None and (name.startswith("asr") or name.endswith("rate")) and value > 1:
            raise ValueError(f"attack/{name}={value!r} is a rate above 1")


def parse_peer_record(body: bytes, mine: dict, max_new_tokens: int) -> dict:
    """The keys of a peer's round record ``body`` (JSON bytes, as posted in ``rec{r}``) that the main merges.

    Args:
        body: the bytes the peer posted (at most :data:`MAX_RECORD_BYTES`).
        mine: the main's own record of the same round (the reference: round, evaluation keys, ``eval/n``, messages).
        max_new_tokens: ``sampling.max_new_tokens`` (the longest completion an evaluation can hold).

    Returns:
        ``{key: value}`` of the trusted keys only (the module's table), ready for ``merge_records``.

    Raises:
        RecordRefused: the body is too large, not JSON, not an object, breaks a field's rule or disagrees with the
            main's record; its message is one line, ``record: <what>``.
    """
    if len(body) > MAX_RECORD_BYTES:
        raise RecordRefused(f"record: {len(body)} bytes, above the {MAX_RECORD_BYTES} a round record may hold")
    try:
        peer = PeerRecord.model_validate_json(body)
        _check(peer, mine, max_new_tokens)
    except ValidationError as err:
        first = err.errors()[0]
        where = "/".join(str(p) for p in first.get("loc", ()) if p != "__root__")
        msg = first["msg"].removeprefix("Value error, ")
        raise RecordRefused(f"record: {where + ': ' if where else ''}{msg}"[:300]) from None
    except ValueError as err:
        raise RecordRefused(f"record: {err}"[:300]) from None
    return peer.merged_keys()

