"""Clocked rounds (``swarm.protocol.schedule=clock``, :mod:`dgrpo.transports.clocked`), in process: the set rule as a
pure function over receipts and relays with their times, hand-worked and exhaustively over one attacker's choices at
n = 4; the common start's check; the config fields' one-line refusals."""

import itertools
import time

import pytest

from dgrpo.config import load_config
from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.transports.clocked import Clock, agree_start, relay_of, round_set

CLOCK = Clock(t0=100.0, round_s=10.0, direct_s=2.0, relay_s=2.0)  # round 1: P = 110, A = 112, B = 114
N = 1
HONEST = (0, 1, 2)
ATTACKER = 3
HONEST_KEYS = {f"h{k}": k for k in HONEST}  # one message per honest owner, served at P_1


def _sets(direct_x: dict[int, float], lies: dict[int, tuple[float, dict]] | None = None,
          relay_at: dict[int, float] | None = None) -> dict[int, set]:
    """Each honest node's round-1 set, the attacker's message "x" read directly by node h at ``direct_x[h]``, each
    honest owner's message read by every honest node at 111.0 (its own at P_1), the attacker's relay to node h
    ``lies[h]`` = (when read, {key: owner}), each honest relay read by the others at ``relay_at[h]`` (default 112.5)."""
    direct = {h: {k: (o, 110.0 if o == h else 111.0) for k, o in HONEST_KEYS.items()} for h in HONEST}
    for h, at in direct_x.items():
        direct[h]["x"] = (ATTACKER, at)
    relay_at = relay_at or {}
    out = {}
    for h in HONEST:
        relays = {j: (relay_at.get(j, 112.5), relay_of(direct[j], CLOCK, N)) for j in HONEST if j != h}
        if lies and h in lies:
            relays[ATTACKER] = lies[h]
        out[h] = round_set(h, direct[h], relays, CLOCK, N)
    return out


def test_the_deadlines_of_a_round_are_absolute():
    assert (CLOCK.post_by(1), CLOCK.direct_until(1), CLOCK.relay_until(1)) == (110.0, 112.0, 114.0)
    assert (CLOCK.post_by(0), CLOCK.relay_until(3)) == (100.0, 134.0)


def test_an_attackers_message_read_directly_by_one_honest_node_in_time_is_in_every_honest_set():
    sets = _sets({0: 111.95})  # (s4n2ev2 on the clock: served to a victim just before A_1, to nobody else)
    assert sets[0] == sets[1] == sets[2] == {"h0", "h1", "h2", "x"}


def test_an_attackers_message_read_after_the_direct_deadline_is_in_no_set():
    sets = _sets({0: 112.05, 1: 112.3})  # (served to the victims late: past A_1 at both)
    assert sets[0] == sets[1] == sets[2] == {"h0", "h1", "h2"}


def test_an_attackers_own_message_relayed_only_by_itself_counts_nowhere():
    lie = (112.2, {"x": ATTACKER})  # (in time, but its own: one signature, owner = relayer)
    sets = _sets({}, lies={0: lie, 1: lie})
    assert sets[0] == sets[1] == sets[2] == {"h0", "h1", "h2"}


def test_a_false_relay_to_one_node_drops_nothing():
    """The "liar" of docs/distributed.md (task h31u1's candidate): a relay to node 0 alone that lacks node 2's
    message. A union: node 0 keeps what it read; nobody drops a message on one peer's word."""
    sets = _sets({}, lies={0: (112.2, {"h0": 0, "h1": 1})})
    assert sets[0] == sets[1] == sets[2] == {"h0", "h1", "h2"}


def test_an_honest_node_that_skips_the_round_is_in_no_set():
    direct = {h: {k: (o, 111.0) for k, o in HONEST_KEYS.items() if o != 2} for h in HONEST}  # (2 past P_1: not served)
    sets = {h: round_set(h, direct[h], {j: (112.5, relay_of(direct[j], CLOCK, N)) for j in HONEST if j != h}, CLOCK, N)
            for h in HONEST}
    assert sets[0] == sets[1] == sets[2] == {"h0", "h1"}


def test_a_relay_read_after_its_deadline_does_not_count():
    """The assumption the rule needs (an honest relay read within relay_s): node 0's relay read past B_1 leaves x,
    read directly by node 0 alone, out of the others' sets. This is the one way the sets differ: a broken margin."""
    sets = _sets({0: 111.9}, relay_at={0: 114.2})
    assert "x" in sets[0] and "x" not in sets[1] and "x" not in sets[2]


@pytest.mark.parametrize("x_direct", [set(s) for r in range(4) for s in itertools.combinations(HONEST, r)])
def test_one_attacker_cannot_make_two_honest_sets_differ(x_direct):
    """Every choice of the attacker at n = 4 (which honest nodes read its "x" by A_1, and to each honest node a relay
    of: nothing, its own x in time, its own x late, a false relay naming honest messages in time, or late): the three
    honest sets are one, and x is in it exactly when some honest node read it directly by A_1."""
    choices = [None, (112.3, {"x": ATTACKER}), (114.5, {"x": ATTACKER}), (112.3, {"h0": 0}), (114.5, {"h1": 1, "x": 3})]
    for lies in itertools.product(choices, repeat=3):
        for at in (111.0, 111.99):
            sets = _sets({h: at for h in x_direct} | {h: 112.01 for h in HONEST if h not in x_direct},
                         lies={h: lie for h, lie in zip(HONEST, lies) if lie is not None})
            assert sets[0] == sets[1] == sets[2], (x_direct, lies, sets)
            assert ("x" in sets[0]) == bool(x_direct)


class _Chan:
    def __init__(self):
        self.said = []

    def announce_stop(self, why):
        self.said.append(why)


class _Transport:
    """What :func:`agree_start` uses of a transport: the rank, the signed start-up exchange's result, the stop."""

    def __init__(self, values):
        self.rank, self.values, self.chan = 1, values, _Chan()

    def gather_values(self, tag, value, timeout_s=None):
        assert tag == "clock" and timeout_s == 20
        return {**self.values, self.rank: value}


class _Protocol:
    round_s, direct_s, relay_s = 8.0, None, 1.5


def test_the_common_start_is_the_latest_signed_proposal():
    """The latest (node 0's, 20 s ahead; this rank's own is 16 s ahead): a proposal in the past (rank 2's "0") cannot
    make the honest ranks skip their first rounds."""
    latest = round(time.time() + 20.0, 3)
    clock = agree_start(_Transport({0: f"{latest:.3f}", 2: "0"}), _Protocol(), 20)
    assert clock == Clock(latest, 8.0, 2.0, 1.5, first=None)  # (first: set by starts_at before the first round)


@pytest.mark.parametrize("value", ["junk", "nan", "inf", "an hour ahead"])
def test_a_start_that_is_no_time_near_now_stops_the_run_naming_its_proposer(value):
    if value == "an hour ahead":  # (computed here: a collected parameter must be the same in every xdist worker)
        value = str(time.time() + 3600)
    t = _Transport({0: f"{time.time() + 16:.3f}", 2: value})
    with pytest.raises(PeerFailure, match=r"^node 2 proposed the clock start .*stopping before round 0") as err:
        agree_start(t, _Protocol(), 20)
    assert "\n" not in str(err.value) and t.chan.said == [str(err.value)]


@pytest.mark.parametrize("overrides, field", [
    (["swarm.protocol.schedule=clock"], "swarm.transport=distributed only"),
    (["swarm.protocol.schedule=clock", "swarm.transport=distributed", "swarm.protocol.round_s=10",
      "swarm.protocol.direct_s=6", "swarm.protocol.relay_s=4"], "must be less than swarm.protocol.round_s=10s"),
    (["swarm.protocol.schedule=clock", "swarm.transport=distributed", "swarm.protocol.round_s=8"],
     None),  # (a = b = 2 s by default)
    (["swarm.protocol.schedule=clock", "swarm.transport=distributed", "swarm.protocol.round_s=10",
      "swarm.protocol.relay_s=1.5"], "swarm.protocol.relay_s=1.5s is below 2s"),  # (a cap-size payload's decode)
    (["swarm.protocol.schedule=clock", "swarm.transport=distributed", "swarm.protocol.round_s=6"],
     "swarm.protocol.relay_s=1.5s is below 2s"),  # (the default round_s / 4)
    (["swarm.protocol.max_skips=3"], "swarm.protocol.max_skips is used only with swarm.protocol.schedule=clock"),
    (["swarm.protocol.round_s=10"], "swarm.protocol.round_s is used only with swarm.protocol.schedule=clock"),
    (["swarm.protocol.schedule=clocked"], "swarm.protocol.schedule: Input should be 'relative' or 'clock'"),
    (["swarm.protocol.schedule=clock", "swarm.transport=distributed", "swarm.protocol.round_s=0"],
     "swarm.protocol.round_s: Input should be greater than 0"),
])
def test_the_clock_fields_are_refused_in_one_line_naming_the_field(overrides, field):
    if field is None:
        assert load_config(None, overrides).swarm.protocol.schedule == "clock"
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert field in str(err.value) and "\n" not in str(err.value)


class _Ledger:
    def __init__(self):
        self.accused = []

    def accuse(self, peer, tag):
        self.accused.append((peer, tag))

    def expelled(self, peer, deadline=None):
        return None

    def poll(self):
        return False

    live_at = refresh = forget = lambda self, *a: None


class _Exchanger:
    """What :func:`clocked.collect` and the blame it calls use of a StoreExchange."""

    def __init__(self, chan):
        from types import SimpleNamespace

        self.rank, self.first, self.chan, self.ledger, self.failed, self.refused = 0, None, chan, _Ledger(), [], []
        self.store, self.alive = SimpleNamespace(lost=None), {0, 1, 2}
        self.schedule, self.wait = SimpleNamespace(posted={}), SimpleNamespace(limit_name="swarm.timeout_s", timeout_s=5)
        self.refuse = lambda node, why: self.refused.append((node, why))

    def _fail(self, peers, tag, what, empty=()):
        self.failed.append((list(peers), tag))

    _check_out = _expel = lambda self, *a: None


class _Served:
    """Peer 1 serves every key at once; peer 2 never."""

    down: dict = {}

    def fetch(self, owner, key, cap, deadline, budget=2.0):
        time.sleep(0.01)
        return (b"payload", None) if owner == 1 else (None, None)


def _collect(tag: str, opened_ago: float):
    """clocked.collect of ``tag`` on a fake transport whose exchange opened ``opened_ago`` seconds ago, for 0.3 s."""
    from types import SimpleNamespace

    from dgrpo.transports import clocked

    chan = _Served()
    ex = _Exchanger(chan)
    a = 2.0
    t0 = time.time() - opened_ago - (a if tag.startswith("eq") else 0.0)
    t = SimpleNamespace(rank=0, alive=ex.alive, chan=chan, exchanger=ex, clock=Clock(t0, 10.0, a, 4.0),
                        _refuse=ex.refuse)  # (relay_s = 4 s: the eq margin is its 1.5 s, not half the window)
    got = clocked.collect(t, tag, range(3), time.monotonic() + 0.3, 1 << 20)
    return got, ex


@pytest.mark.parametrize("tag", ["r0", "eq0"])
def test_a_peer_missing_at_the_deadline_is_accused_by_a_node_that_read_from_the_opening(tag):
    got, ex = _collect(tag, 0.0)
    assert got == {1: b"payload"} and ex.ledger.accused == [(2, tag)] and ex.failed == [([2], tag)]


@pytest.mark.parametrize("tag, late", [("r0", 1.0), ("eq0", 2.0)])
def test_a_node_that_entered_the_exchange_late_accuses_nobody(tag, late):
    """Past P_n + 0.5 s (it skipped the round) or its direct reads' end + 1.5 s: honest nodes late together (a load
    spike) must not make a quorum against an on-time one. Just inside those margins it still accuses."""
    got, ex = _collect(tag, late)
    assert got == {1: b"payload"} and ex.ledger.accused == [] and ex.failed == []
    got, ex = _collect(tag, late - 0.6)
    assert ex.ledger.accused == [(2, tag)]


def test_a_start_at_the_edge_of_the_bound_is_decided_alike_by_ranks_that_read_it_at_different_times(monkeypatch):
    """Review h31r: the attacker serves its proposal (the same signed value to everyone, so no two-faced stop) to
    node 1 a second before node 2 (it controls when each read of its value ends, so when each rank's gather
    returns). Judged against each rank's own clock at that moment, a value 0.5 s inside node 2's bound and 0.5 s past
    node 1's split the honest ranks: node 1 stops before round 0, node 2 waits ~startup_timeout_s for T0 (and then
    meets node 1's stop). The decision must be a function of the agreed values alone: both ranks decide alike."""
    from types import SimpleNamespace

    from dgrpo.transports import clocked

    now = 1_000_000.0
    honest = {0: f"{now + 16:.3f}", 1: f"{now + 16.2:.3f}", 2: f"{now + 15.9:.3f}"}
    edge = f"{now + 1 + 20 + 16 - 0.5:.3f}"  # (inside bound at node 2's read, now + 1; past it at node 1's, now)
    outcomes = []
    for rank, read_at in ((1, now), (2, now + 1.0)):
        monkeypatch.setattr(clocked, "time", SimpleNamespace(time=lambda at=read_at: at, monotonic=time.monotonic))
        t = _Transport({k: v for k, v in honest.items() if k != rank} | {3: edge})
        t.rank = rank
        t.gather_values = lambda tag, value, timeout_s=None, t=t, own=honest[rank]: {**t.values, t.rank: own}
        try:
            outcomes.append(agree_start(t, _Protocol(), 20).t0)
        except PeerFailure as err:
            outcomes.append(str(err).split(" proposed")[0])
    assert outcomes[0] == outcomes[1], outcomes


@pytest.mark.parametrize("past", ["0", "-1e9"])
def test_a_start_far_in_the_past_names_nobody_and_changes_nothing(past):
    """n = 3 and 4: a proposal far in the past neither stops the run nor names an honest rank (T0 = the latest)."""
    for world in (3, 4):
        latest = round(time.time() + 16.0, 3)
        values = {k: f"{latest - 0.1 * k:.3f}" for k in range(world - 1) if k != 1} | {world - 1: past}
        t = _Transport(values)
        t.gather_values = lambda tag, value, timeout_s=None, t=t: {**t.values, 1: f"{latest - 0.05:.3f}"}
        assert agree_start(t, _Protocol(), 20).t0 == latest


def _exchange_round(payload: bytes | None, past_post: float):
    """clocked._exchange of ``r0`` (``payload`` None: this node skipped the round) on a fake transport that entered it
    ``past_post`` seconds past ``P_0``, reading for 0.3 s (peer 1 serves, peer 2 never)."""
    from types import SimpleNamespace

    from dgrpo.transports import clocked
    from dgrpo.transports.framing import KeyCaps

    chan = _Served()
    chan.delete_key = lambda key: None
    ex = _Exchanger(chan)
    t = SimpleNamespace(rank=0, alive=ex.alive, chan=chan, exchanger=ex, clock=Clock(time.time() - past_post, 10.0, 2.0,
                        2.0), _refuse=ex.refuse, _own_keys=[], _held=[], HELD=2, world_size=3,
                        caps=KeyCaps(1, 1, 1 << 20))
    t.post = lambda tag, raw, framed=False: t._own_keys.append((f"{tag}/data/0", raw, framed))
    t.collect = lambda tag, peers, deadline=None: clocked.collect(t, tag, peers, deadline, 1 << 20)  # (the path
    # _exchange took before review h31r2, blind to the skip)
    got = clocked._exchange(t, "r0", payload, time.monotonic() + 0.3, framed=True)
    return got, ex


def test_a_node_that_skipped_the_round_accuses_nobody_even_inside_the_entry_margin():
    """Review h31r2: the attacker's completions at the length cap (in every honest set alike) make the honest nodes'
    compute longer alike, so they miss P_n together by less than the 0.5 s entry margin: each skipped (served
    nothing) and accused the other late ones, which with the attacker's word was a quorum against each (3 of 4 for
    each of two late nodes at n = 4). A node that skipped the round is outside the assumptions itself: it names what it
    missed and accuses nobody. One that served in time and entered its reads as late still accuses."""
    got, ex = _exchange_round(None, 0.2)
    assert got == {1: b"payload"} and ex.ledger.accused == [] and ex.failed == []
    got, ex = _exchange_round(b"mine", 0.2)
    assert got == {0: b"mine", 1: b"payload"} and ex.ledger.accused == [(2, "r0")]


@pytest.mark.parametrize("clocked", [True, False])
def test_the_mains_record_read_on_the_clock_is_one_short_read(monkeypatch, clocked):
    """Review h31r2: the main read its peers' round records for record_s(timeout_s) = W / 2 (224 s at the default
    timeout_s=900) after its update, inside the clock's compute window: a reporter that withholds its record
    (metrics: it blames nobody) held the main that long every round, so it missed its next P_n, skipped, and the
    others' accusations with the attacker's were a quorum against it. On the clock the first read is one short read
    (LATE_READ_S); a record not in then is held and read again at the next record, as a late one is."""
    from types import SimpleNamespace

    from dgrpo.transports import recordreads
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.framing import KeyCaps
    from dgrpo.transports.waits import record_s

    seen = []
    monkeypatch.setattr(recordreads, "_read", lambda ex, tag, peers, cap, wait_s, note: seen.append(wait_s) or {})
    ex = SimpleNamespace(schedule=SimpleNamespace(enter=lambda tag: None), wait=SimpleNamespace(timeout_s=900.0))
    t = SimpleNamespace(is_main=True, exchanger=ex, caps=KeyCaps(1, 1, 1 << 20), world_size=4,
                        clock=Clock(time.time(), 30.0, 5.0, 5.0) if clocked else None)
    assert DistributedTransport.collect_at_main(t, "rec0", b"{}", [0, 1, 2, 3]) == {}
    assert seen == [recordreads.LATE_READ_S if clocked else record_s(900.0)]


def test_a_node_left_less_than_half_its_relay_window_accuses_nobody():
    """Review h31r2: the eq{n} entry margin was 1.5 s whatever relay_s (the config allows any relay_s > 0): with
    relay_s = 1 s, two honest nodes that entered eq{n} 0.8 s past A_n (a load spike, or the attacker's payload at its
    cap served to them just before A_n) had 0.2 s to read the relays, missed the on-time honest node's and accused it:
    with the attacker's word a quorum against a node that did nothing wrong. The margin is at most half the window."""
    from types import SimpleNamespace

    from dgrpo.transports import clocked

    chan = _Served()
    ex = _Exchanger(chan)
    t0 = time.time() - 0.8 - 2.0  # (A_0 = t0 + 2 s: this node enters eq0 0.8 s past it; B_0 = A_0 + 1 s)
    t = SimpleNamespace(rank=0, alive=ex.alive, chan=chan, exchanger=ex, clock=Clock(t0, 10.0, 2.0, 1.0),
                        _refuse=ex.refuse)
    got = clocked.collect(t, "eq0", range(3), time.monotonic() + 0.2, 1 << 20)
    assert got == {1: b"payload"} and ex.ledger.accused == [] and ex.failed == []
