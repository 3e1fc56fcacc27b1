"""The clocked schedule's config fields (``swarm.protocol.schedule``, ``round_s``, ``direct_s``, ``relay_s``: task
h31v; ``max_skips``: task h31k): their defaults, their one-line checks, and the serializer that leaves them out while
unset. What the schedule does is :mod:`dgrpo.transports.clocked`.

The default (issue 31, task h31d): ``schedule`` unset on ``swarm.transport=distributed`` is ``clock`` with
``round_s: auto`` (:func:`is_default`), checked as such when the config is read (:func:`check`,
:func:`check_untimed`: a refusal then names ``swarm.protocol.schedule`` and both fixes) and written out by a new
run (:func:`resolved`), so its ``config.yaml`` records the schedule it ran. A config read back keeps the field
unset (every committed config dumps as before); a resume of a distributed run whose ``config.yaml`` records no
schedule (saved before this default, which ran ``relative``, or by an in-process run) is refused in one line
(:data:`UNRECORDED`): the schedule is part of the run's checkpointed config, so ``relative`` is the one it can
resume on, and the user says so."""

from __future__ import annotations

import math

from dgrpo.errors import ConfigError

MIN_RELAY_S = 2.0  # the least relay_s accepted: an honest relay's build after a cap-size payload read just before A_n


AUTO_WINDOW_S = 4.0  # direct_s and relay_s unset with round_s=auto: sized for a transfer, not for the round (below)


def windows(protocol, round_s: float | None = None) -> tuple[float, float, float]:
    """(round_s, a, b) of a ``swarm.protocol`` config, seconds. ``a`` and ``b`` default to round_s / 4 each; with
    ``round_s: auto`` to :data:`AUTO_WINDOW_S` each (a window must hold an honest transfer, a payload at its byte cap
    or a relay, and its decode, which does not grow with the round's compute: a quarter of an agreed 120 s round
    would be 30 s of waiting per window), and ``round_s`` is the agreed value passed in (None before the agreement:
    nan)."""
    r = protocol.round_s
    auto = r == "auto"
    if auto:
        r = math.nan if round_s is None else round_s
    default = AUTO_WINDOW_S if auto else r / 4
    return r, (protocol.direct_s if protocol.direct_s is not None else default), \
        (protocol.relay_s if protocol.relay_s is not None else default)


def round_s_value(cls, value):
    """``swarm.protocol.round_s`` as given: None, ``auto`` or a number in (0, a week] are passed on; anything else is
    one line (pydantic names each member of the union apart: a number or a word)."""
    if value is None or value == "auto":
        return value
    if isinstance(value, str):
        raise ValueError(f"Input should be a number of seconds or auto (got {value[:40]!r})")
    if not isinstance(value, (int, float)):  # (a list, a mapping: review r31p; a bool: the registry's own line)
        raise ValueError(f"Input should be a number of seconds or auto (got a {type(value).__name__})")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 < value <= 7 * 86400:
        raise ValueError(f"Input should be greater than 0 and at most a week, 604800 s (got {value:g})")
    return value


def relative_left_out(self, handler) -> dict:
    """``swarm.protocol``'s serializer: the clock fields left out while unset (no schedule, no round_s), so a config,
    its YAML and its fingerprint are those of before the fields existed. An explicit ``schedule: relative`` is
    written (on distributed, unset is the clock); elsewhere ``SwarmConfig`` keeps it unset (:func:`unset_elsewhere`)."""
    data = handler(self)
    for key in ("schedule", "round_s", "direct_s", "relay_s", "max_skips"):
        if data.get(key) is None:
            data.pop(key, None)
    return data


def is_default(swarm) -> bool:
    """Whether a ``swarm`` config runs the default schedule: ``swarm.protocol.schedule`` unset on
    ``swarm.transport=distributed``, which is ``clock`` (``round_s`` unset: ``auto``)."""
    return swarm.protocol.schedule is None and swarm.transport == "distributed"


def unset_elsewhere(swarm) -> None:
    """``schedule: relative`` on a transport other than distributed is held as unset (its meaning there: one
    message set by construction in-process, hivemind's own deadlines), so such a config dumps as before the default
    changed (the field was left out when relative). Called by ``SwarmConfig``'s validator (frozen: set in place)."""
    if swarm.protocol.schedule == "relative" and swarm.transport != "distributed":
        object.__setattr__(swarm, "protocol", swarm.protocol.model_copy(update={"schedule": None}))


def auto_where_unset(swarm) -> None:
    """An explicit ``schedule: clock`` on distributed with ``round_s`` unset takes ``auto``, as the default does (a user
    who writes the default out gets the default; before, it was refused for want of round_s). Called by
    ``SwarmConfig``'s validator (frozen: set in place); the config then records ``round_s: auto``."""
    p = swarm.protocol
    if p.schedule == "clock" and p.round_s is None and swarm.transport == "distributed":
        object.__setattr__(swarm, "protocol", p.model_copy(update={"round_s": "auto"}))


def _clock_of(swarm):
    """The ``swarm.protocol`` the default stands for: ``schedule=clock`` and ``round_s`` auto where unset."""
    p = swarm.protocol
    return p.model_copy(update={"schedule": "clock", "round_s": "auto" if p.round_s is None else p.round_s})


DEFAULT_IS = ("swarm.protocol.schedule is unset, which on swarm.transport=distributed is clock with round_s={round_s} "
              "(split-proof; docs/distributed.md, Clocked rounds)")
RELATIVE_FIX = ("or set swarm.protocol.schedule=relative (faster rounds, but one malicious rank can split the honest "
                "nodes' message sets)")
CLOCK_FIELDS = ("round_s", "direct_s", "relay_s", "max_skips")  # used only with schedule=clock (check)


def clock_values(protocol) -> tuple:
    """The values of :data:`CLOCK_FIELDS` in ``protocol``, in that order (None: unset)."""
    return protocol.round_s, protocol.direct_s, protocol.relay_s, protocol.max_skips


def relative_fix(protocol) -> str:
    """:data:`RELATIVE_FIX` for ``protocol`` (a ``swarm.protocol`` config): with a clock field given, also the fields
    to leave out, since ``relative`` beside them is refused in turn (review r31d F2)."""
    given = [f"swarm.protocol.{f}" for f, v in zip(CLOCK_FIELDS, clock_values(protocol)) if v is not None]
    if not given:
        return RELATIVE_FIX
    return RELATIVE_FIX.replace("=relative ", f"=relative and leave out {', '.join(given)} ", 1)
UNRECORDED = ("swarm.protocol.schedule: {run_dir}/config.yaml records none (saved before distributed runs defaulted to "
              "the clocked schedule, when they ran relative, or by an in-process run), and a distributed resume must "
              "keep the schedule its checkpoint was saved with: resume with swarm.protocol.schedule=relative (not "
              "split-proof), or start a new run for the clocked schedule")


def resolved(run, run_dir=None):
    """``run`` (a ``RunConfig``) as it runs: on the default schedule (:func:`is_default`) a new run's copy with
    ``schedule: clock`` and ``round_s`` (``auto`` where unset) written in, so its ``config.yaml``, checkpoints and
    fingerprint record the schedule it ran; any other config as it is. The checks already ran on the default as
    clock (:func:`check`), so the copy is valid.

    Args:
        run_dir: None for a new run; a resumed run's folder (its ``config.yaml`` read back).

    Raises:
        ConfigError: a resume (``run_dir`` given) on the default with no clock field (``round_s`` …) given:
            :data:`UNRECORDED`, one line. With one (``schedule`` dropped by an override or an edit, ``round_s: auto``
            kept) the config is the clock's and was written since the default (before it, a clock field without
            ``schedule: clock`` was refused), so it resolves to the clock and the checkpoint's hash decides (review
            r31d F3: before, UNRECORDED told such a clocked run to resume as relative, which its hash refuses).
    """
    if not is_default(run.swarm):
        return run
    if run_dir is not None and not any(v is not None for v in clock_values(run.swarm.protocol)):
        raise ConfigError(UNRECORDED.format(run_dir=run_dir))  # (a clock field: since the default; the hash decides)
    return run.model_copy(update={"swarm": run.swarm.model_copy(update={"protocol": _clock_of(run.swarm)})})


def check(swarm) -> None:
    """Validate the clocked-schedule fields of a ``swarm`` config (called by ``SwarmConfig``'s validator).

    Raises:
        ValueError: one line naming the field and the fix.
    """
    if is_default(swarm):
        try:
            return check(swarm.model_copy(update={"protocol": _clock_of(swarm)}))
        except ValueError as err:  # (one line: what the default is, the clock's own fix, or the relative schedule)
            raise ValueError(f"{DEFAULT_IS.format(round_s=swarm.protocol.round_s or 'auto')}: {err}; "
                             f"{relative_fix(swarm.protocol)}") from None
    p = swarm.protocol
    if p.schedule != "clock":
        given = [f for f, v in zip(CLOCK_FIELDS, clock_values(p)) if v is not None]
        if given:
            fix = ("set swarm.protocol.schedule=clock or leave it out" if swarm.transport == "distributed" else
                   f"leave it out (swarm.transport={swarm.transport} has no clocked schedule)")  # (task u31g)
            raise ValueError(f"swarm.protocol.{given[0]} is used only with swarm.protocol.schedule=clock; {fix}")
        return
    if swarm.transport != "distributed":
        raise ValueError(f"swarm.protocol.schedule=clock is built for swarm.transport=distributed only (got "
                         f"{swarm.transport!r}); set swarm.protocol.schedule=relative")
    r, a, b = windows(p)
    if p.round_s == "auto" and a + b >= swarm.timeout_s:
        raise ValueError(f"swarm.protocol.round_s=auto takes at most swarm.timeout_s={swarm.timeout_s:g}s a round, "
                         f"which must exceed swarm.protocol.direct_s + swarm.protocol.relay_s ({a:g} + {b:g}s); raise "
                         "swarm.timeout_s or lower direct_s / relay_s")
    if p.round_s != "auto" and a + b >= r:
        raise ValueError(f"swarm.protocol.direct_s + swarm.protocol.relay_s ({a:g} + {b:g}s) must be less than "
                         f"swarm.protocol.round_s={r:g}s (what is left is each round's compute); raise round_s or "
                         "lower direct_s / relay_s")
    if b < MIN_RELAY_S:
        raise ValueError(f"swarm.protocol.relay_s={b:g}s is below {MIN_RELAY_S:g}s: an attacker can serve one node a "
                         "payload at its byte cap just before A_n, whose decode delays that node's relay past B_n "
                         f"(docs/distributed.md, Clocked rounds); set swarm.protocol.relay_s={MIN_RELAY_S:g} or more "
                         "(unset, it is round_s / 4)")


TIMED = ("replay", "tolerant_replay", "topk", "step_checker", "reward_outlier")  # defense kinds round_s: auto may run
# beside (roundtime times a regenerating replay; the others' one forward or arithmetic per group is inside SAFETY); any
# other kind (judge: generation or endpoint calls, toploc: a prefill of every received completion, a kind added later)
# is refused until it is timed: an allow-list fails closed


TIMED_TASKS = ("arithmetic", "gsm8k", "python_math", "dataset")  # task kinds whose reward auto times (python_math's
# programs, training/roundtime.py) or SAFETY covers (answer parsing); dataset with its built-in math reward only: a
# reward function of the user's (task.reward, task.rewards) or a kind added later is refused until timed
# (review r31d F6)


def untimed_reward(task) -> str | None:
    """What of ``task`` (a task config) :data:`TIMED_TASKS` leaves untimed, as the line names it; None: all timed."""
    if task.kind not in TIMED_TASKS:
        return f"the {task.kind} task's reward"
    if task.kind == "dataset" and (task.reward is not None or task.rewards):
        return "task.reward" if task.reward is not None else "task.rewards"
    return None


def check_untimed(run) -> None:
    """``round_s: auto`` with a defense whose cost the estimate does not time (a kind not in :data:`TIMED`: a judge's
    generation or endpoint calls, TOPLOC's prefill of every received completion, both on the attacker's completions at the cap):
    refused in one line (review r31p: the agreed round could not hold them, so every honest node would skip every
    round); so is a reward :func:`untimed_reward` names (review r31d F6: a reward function of the user's runs on
    every received completion too, and the allow-list of defenses failed closed while the task's failed open)."""
    kinds = [f"the {d.kind} defense" for d in run.defenses if d.kind not in TIMED]
    kinds += [r for r in [untimed_reward(run.task)] if r is not None]
    if is_default(run.swarm) and run.swarm.protocol.round_s is None and kinds:
        raise ValueError(f"{DEFAULT_IS.format(round_s='auto')}, and round_s=auto does not time {kinds[0]}: "
                         "set swarm.protocol.round_s to seconds sized for it (its work on every received completion, "
                         "the attacker's at the length cap, inside each round's compute window) "
                         f"{relative_fix(run.swarm.protocol)}")
    if run.swarm.protocol.round_s == "auto" and kinds:
        raise ValueError(f"swarm.protocol.round_s=auto does not time {kinds[0]} (its work on every received "
                         "completion, the attacker's at the length cap, inside each round's compute window): set "
                         "swarm.protocol.round_s to seconds sized for it (docs/distributed.md, round_s: auto)")
