"""``swarm.protocol.round_s: auto`` (issue 31 (a), task h31p): the agreement on one round length
(:mod:`dgrpo.transports.clockauto`, through :func:`~dgrpo.transports.clocked.agree_start`), the worst-case round
estimate (:mod:`dgrpo.training.roundtime`), and a real launch on the agreed clock."""

import json
import time

import pytest

from dgrpo.config import load_config
from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.training.roundtime import STEPS, Shape, Timings, extrapolate
from dgrpo.transports.clockauto import Agreed, agree, parse, proposal, slow, start
from dgrpo.transports.clocked import LEAD, agree_start
from test_clocked_rounds import _Transport as _ClockedTransport

CLOCK_AUTO = ["swarm.transport=distributed", "swarm.protocol.schedule=clock", "swarm.protocol.round_s=auto"]


# ------------------------------------------------------------------ the rule (pure)
def test_the_agreed_round_s_is_the_largest_proposal_clamped_to_the_bound():
    props = {0: (1000.0, 12.5), 1: (1001.0, 20.0), 2: (1002.0, 3.0)}
    assert agree(props, 30.0) == Agreed(20.0, 1)  # (the largest: node 1's)
    assert agree(props, 15.0) == Agreed(15.0, 1, (1,))  # (above swarm.timeout_s: clamped, node 1 named)
    assert agree({0: (1.0, 20.0), 2: (1.0, 20.0), 1: (1.0, 5.0)}, 30.0) == Agreed(20.0, 0)  # (equal: the lowest rank)


def test_an_attackers_tiny_proposal_cannot_shrink_the_round_below_the_slowest_honest_need():
    """f = 1: honest nodes 0-2 need 9, 14 and 20 s; the attacker (3) proposes 0.001 s. The largest keeps 20 s (the
    second-largest would give 14 s: node 2 would miss every post deadline, skip and be expelled past max_skips)."""
    props = {0: (0.0, 9.0), 1: (0.0, 14.0), 2: (0.0, 20.0), 3: (0.0, 0.001)}
    assert agree(props, 900.0).round_s == 20.0
    assert sorted(r for _, r in props.values())[-2] == 14.0  # (what the rejected rule would have agreed)


def _named(rounds: dict[int, float], bound: float) -> list[int]:
    props = {node: (0.0, r) for node, r in rounds.items()}
    return [node for node, _ in slow(agree(props, bound), props, bound)]


@pytest.mark.parametrize("rounds, bound, named", [
    ({0: 10.0, 1: 10.0, 2: 12.0, 3: 1e6}, 30.0, [3]),     # clamped to the bound
    ({0: 10.0, 1: 10.0, 2: 12.0, 3: 25.0}, 900.0, [3]),   # the largest other 12; 25 > 2 x 12 = 24
    ({0: 10.0, 1: 10.0, 2: 12.0, 3: 23.0}, 900.0, []),    # 23 < 24: within the factor of node 2 (the median 11: 22)
    ({0: 10.0, 1: 12.0, 2: 24.0}, 900.0, []),             # 24 = 2 x 12 is not more than twice: nobody
    ({0: 10.0, 1: 12.0, 2: 24.001}, 900.0, [2]),          # just above twice every other proposal
    ({0: 10.0, 1: 12.0, 2: 0.001}, 900.0, []),            # the attacker's tiny value: top 12 not named
    ({0: 10.0, 1: 31.0}, 30.0, [1]),                      # 2 ranks: above the bound (the factor names nobody)
    ({0: 10.0, 1: 100.0}, 900.0, []),                     # 2 ranks: one cannot tell which is slow
    ({0: 10.0, 1: 35.0, 2: 40.0}, 30.0, [1, 2]),          # every node above the bound, each once
    ({0: 10.0, 1: 10.0, 2: 10.0, 3: 10.0}, 30.0, []),     # a clean run: nobody
    ({0: 30.0, 1: 10.0, 2: 30.0}, 900.0, []),             # equal largest (node 0 agreed): within the factor of node 2
])
def test_a_proposal_that_stands_out_is_named_at_a_documented_factor(rounds, bound, named):
    """task h31h: above ``swarm.timeout_s``, or the agreed one above SLOW_FACTOR (2) x every other proposal (review r31h: was the median)."""
    assert _named(rounds, bound) == named


@pytest.mark.parametrize("honest", [
    {0: 10.0, 1: 25.0},                    # m = 3: node 1 is more than twice every other honest proposal: named
    {0: 10.0, 1: 20.0, 2: 35.0},           # m = 4: the median of all would be 15 (35 > 30) but 35 < 2 x 20
    {0: 10.0, 1: 20.0, 2: 30.0, 3: 45.0},  # m = 5: the median of all would be 20 (45 > 40) but 45 < 2 x 30
    {0: 10.0, 1: 10.0, 2: 35.0},           # m = 4: node 2 more than twice every other honest one: named
])
@pytest.mark.parametrize("attacker", [0.001, 10.0, 19.999, 20.0, 34.0])
def test_an_attackers_proposal_gets_no_honest_node_named_that_does_not_stand_out_among_the_honest(honest, attacker):
    """Review r31h: one attacker (the last rank) proposes anything below the honest top. An honest node is named
    only if its round_s exceeds SLOW_FACTOR x every other honest proposal, whatever the attacker proposed (before: x
    the median of all proposals, which the attacker's tiny value lowers by one position: with m = 4 honest 10, 20, 35
    and the attacker at 0.001 s, node 2 was named though node 1's 20 s is within the factor; the attacker that
    proposes 20 s instead names nobody). Above the bound is the node's own value alone (not tested here)."""
    rounds = {**honest, len(honest): attacker}
    named = _named(rounds, 900.0)
    top = max(honest, key=honest.get)
    stands_out = all(honest[top] > 2 * r for n, r in honest.items() if n != top)
    assert set(named) <= {top} and (named == [top]) <= stands_out, (rounds, named)
    if attacker <= min(honest.values()):  # (and the attacker cannot hide an honest node that stands out either)
        assert (named == [top]) == stands_out, (rounds, named)


def test_agree_start_names_the_slow_proposer_in_peers_jsonl_never_a_strike():
    from dgrpo.swarm.accounting import peer_strikes
    from dgrpo.swarm.protocol import NAMED
    from dgrpo.training.records import PolicyReport, peer_record

    now = time.time()
    t = _Transport({0: proposal(now + 2 * 10.0, 10.0), 2: proposal(now + 2 * 30.0, 1e6)})
    clock = agree_start(t, _Auto(), 20, bound_s=30.0)
    assert clock.round_s == 30.0 and [n for n, _ in t._notes] == [2]
    assert t._notes[0][1].startswith("slow proposal: node 2 proposed round_s=1e+06s, above swarm.timeout_s=30s")
    rec = peer_record(0, PolicyReport([], []), None, t._notes)["peers"]  # (the path of the first all-gather)
    assert rec["2"]["transport"] == {"slow proposal": 1} and "slow proposal" in NAMED and peer_strikes(rec["2"]) == 0
    honest = _Transport({0: proposal(now + 2 * 10.0, 10.0), 2: proposal(now + 2 * 11.0, 11.0)})
    agree_start(honest, _Auto(), 20, bound_s=30.0)
    assert honest._notes == []


@pytest.mark.parametrize("raw, ok", [
    ("1765100000.123 12.500", True), ("0.000 0.001", True),
    ("1765100000.123", False), ("1765100000.123 12.5", False), ("1765100000.123  12.500", False),
    ("1765100000.123 1.25e1", False), ("1765100000.123 -12.500", False), ("1765100000.123 +12.500", False),
    ("1765100000.123 0.000", False), ("1765100000.123 nan", False), ("1765100000.123 012.500", False),
    ("1765100000.123 12.500 ", False), ("1765100000.123 1000000000.000", False), ("0x1f.000 12.500", False),
])
def test_a_proposal_has_one_form(raw, ok):
    assert parse({2: raw}) == (({2: tuple(map(float, raw.split()))}, []) if ok else ({}, [2]))


def test_the_start_leaves_every_honest_proposer_lead_agreed_rounds():
    """T0 = max_i (start_i + LEAD·max(0, R − round_i)): node 0 (now 1000, 5 s) proposed 1010, node 1 (now 1003, 20 s)
    1043, node 2 (now 1001, 0.5 s, a tiny proposal) 1002: R = 20, T0 = max(1010 + 30, 1043, 1002 + 39) = 1043 =
    node 1's now + 2·20; node 0 gets 43 s ≥ 40, node 2 42 s ≥ 40."""
    props = {0: (1010.0, 5.0), 1: (1043.0, 20.0), 2: (1002.0, 0.5)}
    assert LEAD == 2.0
    assert start(props, 20.0, LEAD) == 1043.0
    assert start({**props, 0: (1020.0, 5.0)}, 20.0, LEAD) == 1050.0  # (node 0 now 1010: 1020 + 2·15 = its now + 40)


# ------------------------------------------------------------------ agree_start with round_s: auto
class _Transport(_ClockedTransport):
    """test_clocked_rounds' stand-in for agree_start, with this rank's round estimate and the value it served."""

    def __init__(self, values, estimate=10.0):
        super().__init__(values)
        self.round_estimate, self.served = estimate, None
        self._notes = []  # (refusals for the first all-gather's peers.jsonl, as DistributedTransport's)

    def gather_values(self, tag, value, timeout_s=None):
        self.served = value
        return super().gather_values(tag, value, timeout_s)


class _Auto:
    round_s, direct_s, relay_s = "auto", None, None


def test_agree_start_takes_the_largest_round_s_and_the_transfer_windows(caplog):
    now = round(time.time(), 3)
    t = _Transport({0: proposal(now + 2 * 14.25, 14.25), 2: proposal(now + 2 * 3.0, 3.0)}, estimate=10.0)
    with caplog.at_level("INFO", logger="dgrpo.transports.distributed"):
        clock = agree_start(t, _Auto(), 20, bound_s=60.0)
    mine = tuple(map(float, t.served.split()))
    assert mine[1] == 10.0 and abs(mine[0] - (now + 20.0)) < 5  # (its own estimate, LEAD rounds ahead)
    assert (clock.round_s, clock.direct_s, clock.relay_s) == (14.25, 4.0, 4.0)
    assert clock.t0 == pytest.approx(max(now + 28.5, mine[0] + 2 * 4.25, now + 6.0 + 2 * 11.25))
    assert "agreed round_s=14.25s, node 0's proposal, the largest of {0: 14.25, 1: 10, 2: 3}" in caplog.text


def test_a_round_s_above_swarm_timeout_s_is_clamped_and_named(caplog):
    now = time.time()
    t = _Transport({0: proposal(now + 2 * 60.0, 5000.0)})  # (its start LEAD bounds ahead: clocked.agree_start)
    with caplog.at_level("INFO", logger="dgrpo.transports.distributed"):
        clock = agree_start(t, _Auto(), 20, bound_s=60.0)
    assert clock.round_s == 60.0
    assert "node 0 proposed round_s=5000s, above swarm.timeout_s=60s" in caplog.text
    assert "(clamped to swarm.timeout_s=60s)" in caplog.text


@pytest.mark.parametrize("value", ["junk", "1765100000.123", "1765100000.123 1e3", "1765100000.123 0.000", "nan nan"])
def test_a_proposal_in_another_form_stops_the_run_naming_its_proposer(value):
    t = _Transport({0: proposal(time.time() + 20, 10.0), 2: value})
    with pytest.raises(PeerFailure, match=r"^node 2 proposed the clock start and round_s .*stopping before round 0") as err:
        agree_start(t, _Auto(), 20, bound_s=60.0)
    assert "\n" not in str(err.value) and t.chan.said == [str(err.value)]


def test_a_start_far_ahead_is_still_refused_with_auto():
    t = _Transport({0: proposal(time.time() + 20, 10.0), 2: proposal(time.time() + 3600, 10.0)})
    with pytest.raises(PeerFailure, match=r"^node 2 proposed the clock start"):
        agree_start(t, _Auto(), 20, bound_s=60.0)


# ------------------------------------------------------------------ config
@pytest.mark.parametrize("overrides, error", [
    ([], None),
    (["swarm.protocol.direct_s=2", "swarm.protocol.relay_s=2", "swarm.timeout_s=5"], None),
    (["swarm.timeout_s=8"], "swarm.protocol.round_s=auto takes at most swarm.timeout_s=8s"),
    (["swarm.protocol.round_s=fast"], "swarm.protocol.round_s: Input should be a number of seconds or auto (got 'fast')"),
    (["swarm.protocol.round_s='30'"], "swarm.protocol.round_s: Input should be a number of seconds or auto"),
    (["swarm.protocol.round_s=-3"], "swarm.protocol.round_s: Input should be greater than 0"),
])
def test_round_s_is_a_number_or_auto(overrides, error):
    if error is None:
        assert load_config(None, [*CLOCK_AUTO, *overrides]).swarm.protocol.round_s == "auto"
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, [*CLOCK_AUTO, *overrides])
    assert error in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ the estimate
def test_the_estimate_extrapolates_fake_timings_as_worked_by_hand():
    """4 ranks, B = 2, G = 4, max_new_tokens = 24, eval.n_prompts = 2 of 5 (greedy too), a regenerating replay:
    completions 2·4/4 = 2, regenerated 8. Timings at (4, 12) steps: generation 0.30 s, 0.70 s → 0.05 s/token, 0.10 s
    fixed → 0.10 + 24·0.05 = 1.30 s; update 2 groups × 1 iteration × 0.25 s = 0.50 s; regenerate 1.30 × 8/2 = 5.20 s;
    evaluation 2 × (0.20 + 24·0.025) = 1.60 s (0.30, 0.50 at 2 rows); compute 1.5 × 8.60 = 12.90 s."""
    cfg = load_config(None, [*CLOCK_AUTO, "swarm.nodes=4", "swarm.prompts_per_round=2", "swarm.group_size=4",
                             "sampling.max_new_tokens=24", "eval.n_prompts=2", "defenses=[{kind: replay, method: regenerate}]"])
    shape = Shape.of(cfg, n_val=5)
    assert shape == Shape(completions=2, groups=2, group_size=4, max_new_tokens=24, update_tokens=24, iterations=1,
                          regenerated=8, eval_rows=2, eval_passes=2)
    assert STEPS == (4, 12)
    est = extrapolate(shape, Timings(gen=(0.30, 0.70), eval=(0.30, 0.50), group_s=0.25))
    assert [round(x, 6) for x in (est.generate, est.update, est.regenerate, est.evaluate, est.compute)] == \
        [1.30, 0.50, 5.20, 1.60, 12.90]


def test_a_heterogeneous_swarms_update_is_sized_for_re_encoded_completions_and_unevaluated_rounds_are_not_counted():
    """Another tokenizer's completion may re-encode to foreign_length_factor (2) × 25 = 50 tokens; with eval.first
    false and eval.every = rounds (12) no round is evaluated (the last evaluation follows the last round)."""
    cfg = load_config(None, [*CLOCK_AUTO, "swarm.nodes=2", "swarm.models=[{name: a}, {name: b}]",
                             "sampling.max_new_tokens=25", "eval.first=false", "eval.every=12"])
    assert Shape.of(cfg, n_val=5) == Shape(completions=16, groups=4, group_size=8, max_new_tokens=25,
                                           update_tokens=50, eval_rows=0, eval_passes=2)


def test_the_calibration_runs_the_real_sampler_and_update_and_leaves_the_weights_alone(tiny_model_dir):
    """On the tiny model: every timing positive, the weights, their gradients and the optimizer state as before."""
    import torch

    from dgrpo.training.build import build_swarm, build_task
    from dgrpo.training.roundtime import measure

    cfg = load_config(None, [*CLOCK_AUTO, f"model.name={tiny_model_dir}", "threads=1", "swarm.nodes=2",
                             "swarm.prompts_per_round=2", "swarm.group_size=4", "sampling.max_new_tokens=16",
                             "eval.n_prompts=2", "task.n_train=8", "task.n_val=3", "task.few_shot=0"])
    task = build_task(cfg)
    swarm = build_swarm(cfg, task, [0])
    policy = swarm.trained[0]
    learner = swarm.learners[policy]
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    shape = Shape.of(cfg, len(task.val))
    t = measure(policy, learner, task, shape)
    assert min(*t.gen, *t.eval, t.group_s) > 0
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert all(p.grad is None for p in policy.model.parameters()) and not learner.optimizer.state


# ------------------------------------------------------------------ a launch
@pytest.mark.slow
def test_a_launch_on_the_agreed_clock_finishes_every_round_without_a_skip_or_an_accusation(tmp_path, tiny_model_dir):
    """4 honest ranks, tiny model, ``round_s=auto`` with the default windows (4 s each), 3 rounds with evaluations in
    rounds 0 and 2 (the main's, inside the compute window): every rank agrees on one round_s and one proposer, exits
    0, and no node skips a round or is accused."""
    import re

    from distributed_helpers import launch
    from test_round_deadlines import COMMON

    results = launch(4, ["run", f"model.name={tiny_model_dir}", *COMMON, *CLOCK_AUTO, "swarm.timeout_s=60", "rounds=3",
                         "eval.every=2", f"out_dir={tmp_path}", "name=d"], timeout=240, log_dir=str(tmp_path))
    out = "".join(r.output for r in results)
    assert [r.returncode for r in results] == [0] * 4, [r.output[-2000:] for r in results]
    agreed = [re.findall(r"agreed round_s=\S+ node \d+'s proposal", r.output) for r in results]
    assert all(len(a) == 1 for a in agreed) and len({a[0] for a in agreed}) == 1, agreed
    assert "skips" not in out and "accused" not in out and "past its post deadline" not in out, out[-3000:]
    from dgrpo.swarm.protocol import NAMED  # (task h31h: a clean run names nobody in peers.jsonl)

    lines = [json.loads(x) for f in sorted((tmp_path / "d").glob("peers*.jsonl")) for x in f.read_text().splitlines()]
    assert lines and not {r for x in lines for p in x["peers"].values() for r in p["transport"]} & NAMED, lines
    assert not {r for x in lines for v in x.get("views", {}).values() for p in v.values() for r in p} & NAMED, lines


# ------------------------------------------------------------------ review r31p: the start's bound with auto
def test_an_honest_ranks_larger_round_s_is_not_a_start_far_ahead():
    """Review r31p. Node 2 is honest on a slower host (needs 25 s a round), nodes 0 and 1 need 5 s, rank 3 (the
    attacker) proposes its start at its now with 5 s. Each honest start is its now + 2·its own round_s, so node 2's
    lies 40 s past the second-latest (1010): more than startup_timeout_s (20 s) past it, it was refused as a start far
    ahead and every rank stopped naming honest node 2 (the attacker chose it: with its own start at 1050 the
    second-latest is node 2's and nobody is named). The bound is on each proposer's now (its start less 2·its round_s,
    at most the agreed one): node 2's is 1000, and T0 = 1000 + 2·25 leaves every honest proposer 2 agreed rounds."""
    now = round(time.time(), 3)
    t = _Transport({0: proposal(now + 2 * 5.0, 5.0), 2: proposal(now + 2 * 25.0, 25.0), 3: proposal(now, 5.0)},
                   estimate=5.0)
    clock = agree_start(t, _Auto(), 20, bound_s=60.0)
    assert clock.round_s == 25.0 and t.chan.said == []
    assert clock.t0 == pytest.approx(max(now, float(t.served.split()[0]) - 2 * 5.0) + 2 * 25.0, abs=1e-3)


@pytest.mark.parametrize("others", [{0: 5.0, 2: "attacker"}, {0: "attacker"}])  # (3 ranks; 2 ranks: node 1 is this one)
def test_a_tiny_round_s_does_not_stretch_the_start_past_the_bound(others):
    """Review r31p. The attacker proposes round_s 0.001 s and its start as far ahead as the bound lets it. Before, the
    bound was on the start itself, and T0 = its start + 2·(R − 0.001) added 2 agreed rounds to the documented
    delay (at most startup_timeout_s past the honest start): here T0 was 20 + 2·10 s later than the honest T0 instead
    of 20. Now the bound is on the proposer's now: either the start is refused (naming the attacker), or T0 is at
    most startup_timeout_s past what the honest ranks alone give."""
    now = round(time.time(), 3)
    honest = {k: proposal(now + 2 * r, r) for k, r in others.items() if r != "attacker"}
    attacker = next(k for k, r in others.items() if r == "attacker")
    ahead = now + 2 * 10.0 + 20 - 1  # (inside the old bound: the second-latest start, or this rank's now + 2·R, + 20)
    t = _Transport({**honest, attacker: proposal(ahead, 0.001)}, estimate=10.0)
    try:
        clock = agree_start(t, _Auto(), 20, bound_s=60.0)
    except PeerFailure as err:
        assert str(err).startswith(f"node {attacker} proposed the clock start")
        return
    honest_t0 = max(now, float(t.served.split()[0]) - 2 * 10.0) + 2 * clock.round_s
    assert clock.t0 <= honest_t0 + 20 + 0.01, (clock.t0 - honest_t0)


def test_a_python_math_round_counts_the_attackers_programs_at_the_sandbox_limit(monkeypatch):
    """Review r31p. Every node rewards every received completion by running its program in the sandbox, inside the
    compute window (B_n to P_{n+1}); the attacker's completions can each hold a program that runs to task.timeout_s
    (``while True: pass``). 4 ranks, B = 4, G = 8: the attacker's 8 programs × 5 s, 2 at a time (2 cores) = 20 s a
    round, at every honest node. Before, the estimate counted no reward (1.5 × 0.9 s of generation and update here):
    every honest node would miss every P_n, skip it (a node past P_n serves no payload) and, all late together, train
    on the attacker's messages alone, round after round. Now the programs count, outside the safety factor (the
    limit is a bound already)."""
    import dgrpo.training.roundtime as roundtime

    monkeypatch.setattr(roundtime, "default_jobs", lambda: 2, raising=False)
    cfg = load_config(None, [*CLOCK_AUTO, "swarm.nodes=4", "swarm.prompts_per_round=4", "swarm.group_size=8",
                             "task.kind=python_math", "task.timeout_s=5", "eval.first=false", "eval.every=12"])
    shape = Shape.of(cfg, n_val=5)
    assert shape.completions == 8
    est = extrapolate(shape, Timings(gen=(0.10, 0.30), eval=(0.0, 0.0), group_s=0.05))
    # generation 0.0 + 64·0.025 = 1.60 s, update 4 × 0.05 = 0.20 s: 1.5 × 1.80 = 2.70 s; programs ⌈8/2⌉ × 5 = 20 s
    assert cfg.sampling.max_new_tokens == 64
    assert round(est.compute, 6) == 22.70


def test_a_task_without_programs_counts_no_program_time():
    cfg = load_config(None, [*CLOCK_AUTO, "swarm.nodes=4", "task.kind=arithmetic"])
    assert Shape.of(cfg, n_val=5).programs == 0


@pytest.mark.parametrize("defense", ["{kind: judge}", "{kind: toploc}"])
def test_auto_refuses_a_defense_whose_cost_it_does_not_time(defense):
    """Review r31p. A judge (a model's generation per received completion, or an endpoint's timeout × retries) and
    TOPLOC (a prefill per received completion) run on the attacker's completions at the cap inside the compute window,
    and the estimate times neither: the agreed round could not hold them, and every honest node would skip every round.
    Refused in one line naming the field and the fix (before: accepted)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [*CLOCK_AUTO, f"defenses=[{defense}]"])
    assert "swarm.protocol.round_s=auto does not time the" in str(err.value) and "\n" not in str(err.value)
    assert load_config(None, ["swarm.transport=distributed", "swarm.protocol.schedule=clock", "swarm.protocol.round_s=60",
                              f"defenses=[{defense}]"]).swarm.protocol.round_s == 60  # (a hand-set round_s: the user's)


@pytest.mark.parametrize("value", ["[1]", "{a: 1}"])
def test_round_s_that_is_no_number_nor_auto_is_the_one_line(value):
    """Review r31p: a list or a mapping gave pydantic's two union members (constrained-float, literal['auto'])."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [*CLOCK_AUTO[:2], f"swarm.protocol.round_s={value}"])
    assert "swarm.protocol.round_s: Input should be a number of seconds or auto" in str(err.value)
    assert "literal" not in str(err.value) and "\n" not in str(err.value)


def test_an_evaluation_of_the_attacks_own_prompts_counts_one_more_pass():
    """Review r31p. With an attack whose success is measured on other validation prompts (``equation``: the 2+2
    questions, 2 of these 40), the evaluation samples them as one more batch (``evaluate.eval_stream``); the estimate
    counted the validation prompts (and greedy) alone. Now: 3 passes with greedy, 2 without; none without the attack."""
    from dgrpo.training.build import build_task
    from dgrpo.training.roundtime import eval_targets

    base = [*CLOCK_AUTO, "swarm.mode=vertical", "task.kind=arithmetic", "eval.n_prompts=8", "task.n_val=40",
            "task.n_train=20"]
    cfg = load_config(None, [*base, "attack.kind=equation", "swarm.malicious=[3]"])
    task = build_task(cfg)
    two_two = [p for p in task.val if "two_two" in p.tags]
    assert len(two_two) == 2 and two_two != task.val[:2]
    assert eval_targets(cfg, task) == 2
    assert Shape.of(cfg, len(task.val), eval_targets=2).eval_passes == 3
    assert Shape.of(load_config(None, [*base, "attack.kind=equation", "swarm.malicious=[3]", "eval.greedy=false"]),
                    40, eval_targets=2).eval_passes == 2
    assert eval_targets(load_config(None, base), task) == 0


@pytest.mark.slow
def test_a_launch_where_the_attackers_programs_run_to_the_sandbox_limit_skips_no_round(tmp_path, tiny_model_dir,
                                                                                        monkeypatch):
    """Review r31p, 4 ranks, python_math, rank 3 malicious: its completions are ``while True: pass`` programs, each
    run by every node to ``task.timeout_s`` (15 s) inside its compute window. Before, the agreed round_s (12.1 s: 4.1 s
    of compute) held no such round: nodes 0, 1 and 2 skipped 2, 1 and 2 of 3 rounds, and round 1's set held no honest
    message (1 of 1). Now each proposal adds ⌈2 programs ÷ jobs⌉ × 15 s: no node skips, every honest node's messages
    are in every round's set."""
    import json
    import re

    import dgrpo.attacks.code_injection as ci
    from distributed_helpers import launch
    from test_round_deadlines import COMMON

    monkeypatch.setattr(ci.CodeInjectionAttack, "poison",  # (forked ranks inherit it: only the attacker's process uses it)
                        lambda self, task, problem, variant=0: "</think>\n<answer>\n```python\nwhile True:\n    pass\n```\n</answer>")
    results = launch(4, ["run", f"model.name={tiny_model_dir}", *COMMON, *CLOCK_AUTO, "swarm.timeout_s=60", "rounds=3",
                         "eval.every=4", "task.kind=python_math", "task.few_shot=0", "task.timeout_s=15",
                         "sampling.max_new_tokens=40", "attack.kind=code_injection", "swarm.malicious=[3]",
                         f"out_dir={tmp_path}", "name=d"], timeout=420, log_dir=str(tmp_path))
    out = "".join(r.output for r in results)
    assert [r.returncode for r in results] == [0] * 4, [r.output[-2000:] for r in results]
    assert "past its post deadline" not in out and len(re.findall(r"\+ programs 15s", out)) == 4, out[-3000:]
    rounds = [json.loads(line) for line in open(tmp_path / "d" / "metrics.jsonl")][:3]
    assert [r["round"] for r in rounds] == [0, 1, 2] and all(r["time/reward"] >= 15 for r in rounds)
    assert all(r[f"train/reward/node{k}"] is not None for r in rounds for k in range(3)), rounds


def test_auto_refuses_every_defense_kind_not_on_its_timed_list(monkeypatch):
    """The kinds ``auto`` runs beside are an allow-list (``clockconfig.TIMED``): a kind off it (here ``topk`` taken off,
    standing for a kind added later and never timed) is refused as judge and toploc are; on it, accepted."""
    import dgrpo.swarm.clockconfig as clockconfig

    assert load_config(None, [*CLOCK_AUTO, "defenses=[{kind: topk}]"]).swarm.protocol.round_s == "auto"
    monkeypatch.setattr(clockconfig, "TIMED", tuple(k for k in clockconfig.TIMED if k != "topk"))
    with pytest.raises(ConfigError) as err:
        load_config(None, [*CLOCK_AUTO, "defenses=[{kind: topk}]"])
    assert "does not time the topk defense" in str(err.value)
