"""A start-up value one rank serves differently to one reader (review r31q Q2): the config fingerprint and the resume
round are signed by their rank and compared as every rank read them (transports/startagree.py), so every honest rank
stops naming the two-faced rank, or quotes the signed reason of the reader it stopped.

Before, rank 3 serving its fingerprint as ``deadbeef`` to node 2 alone stopped node 2 alone (``ConfigError``, no signed
notice) while nodes 0 and 1 went on and, at the next start-up exchange, waited the whole ``startup_timeout_s`` for
node 2 and named it silent. In-process ranks (tests/transports/signed_ranks.py), each in a thread."""

import threading

import pytest
from signed_ranks import _ranks

from dgrpo.config import load_config
from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.transports.rendezvous import agree_at_start

STARTUP_S = 30.0  # every rank's start-up wait: a line naming who stopped comes from a signed notice or proof, not it


def _run_all(ts, body):
    """``body(rank)`` at every rank, each in a thread; rank → what it returned or raised."""
    out = {}

    def one(k):
        try:
            out[k] = body(k)
        except Exception as err:  # noqa: BLE001 - the outcome under test
            out[k] = err

    threads = [threading.Thread(target=one, args=(t.rank,), daemon=True) for t in ts]
    for th in threads:
        th.start()
    for th in threads:
        th.join(STARTUP_S + 20)
    for t in ts:
        t.chan.close()
    return out


def _two_faced(ts, tag: str, other: str, victim: str, signed: bool):
    """Rank 3's server serves its value of ``tag`` to reader ``victim`` as ``other``: signed with its key as it signs
    its real one (``signed``), or as the bare text (the reviewer's ``x_serveother``)."""
    chan = ts[3].chan

    def hook(key, reader):
        if key != f"{tag}/data/3" or reader != victim or key not in chan.values:
            return None
        if not signed:
            return other.encode()
        return f"{other}|{chan.keys.sign(f'{tag}|3|{other}|{chan.nonce}')}".encode()

    chan.hook = hook


def _cfg():
    return load_config(None, ["swarm.nodes=4", f"swarm.startup_timeout_s={STARTUP_S:g}"])


@pytest.mark.parametrize("signed", [True, False])
def test_a_config_fingerprint_shown_differently_to_one_rank_stops_every_honest_rank_naming_the_two_faced_one(signed):
    """Rank 3 serves node 2 its fingerprint as ``deadbeef``. Signed: node 2's echo carries node 3's signed
    ``deadbeef``, nodes 0 and 1 hold its true signed fingerprint: both verify under node 3's key, so every honest rank
    names node 3. Unsigned: node 2 names node 3 (its own server served a value its key did not sign) and says so,
    signed; nodes 0 and 1, waiting for node 2's echo, stop quoting it. On main: nodes 0 and 1 returned the honest
    nodes (and would train on), node 2 alone raised ConfigError naming node 3, unheard."""
    cfg = _cfg()
    ts, _ = _ranks(timeout_s=STARTUP_S)
    _two_faced(ts, "config", "deadbeef", "2", signed)
    out = _run_all(ts, lambda k: agree_at_start(ts[k], k, cfg))
    assert all(isinstance(out[k], PeerFailure) for k in (0, 1, 2)), out
    if signed:
        for k in (0, 1, 2):
            line = str(out[k])
            assert "node 3 signed two different start-up values of exchange 'config'" in line, (k, line)
            assert "'deadbeef' read by node 2" in line, (k, line)
    else:
        line2 = str(out[2])
        assert line2.startswith("node 3 served a start-up value of exchange 'config' that its key did not sign for its "
                                "server's launch ('deadbeef' read by node 2)"), line2
        for k in (0, 1):
            assert str(out[k]).startswith(f"node 2 stopped at start-up ({line2}"), (k, out[k])
    for k in (0, 1, 2):
        assert "sent nothing" not in str(out[k]) and "node 3" in str(out[k]), (k, out[k])
        assert not isinstance(out[k], ConfigError)


def test_a_resume_round_shown_differently_to_one_rank_stops_every_honest_rank_naming_the_two_faced_one():
    """The resume check (training/resume.py ``restore``) has the same flaw: rank 3 serves node 2 the round ``9``,
    signed, and every other reader ``4``. Before, node 2 alone raised ``nodes resume from different rounds`` (no notice),
    the others started round 4 and would wait for node 2 there. Now every honest rank names node 3 at the exchange."""
    ts, _ = _ranks(timeout_s=STARTUP_S)
    _two_faced(ts, "resume", "9", "2", signed=True)
    out = _run_all(ts, lambda k: ts[k].gather_values("resume", "4", timeout_s=STARTUP_S))
    for k in (0, 1, 2):
        assert isinstance(out[k], PeerFailure), (k, out)
        line = str(out[k])
        assert "node 3 signed two different start-up values of exchange 'resume'" in line, (k, line)
        assert "'9' read by node 2" in line and "'4' read by node" in line, (k, line)


def test_honest_start_up_values_pass_as_every_rank_served_them():
    """Control: nothing two-faced; every rank gets every rank's value (the config: the honest nodes)."""
    cfg = _cfg()
    ts, _ = _ranks(timeout_s=STARTUP_S)
    assert _run_all(ts, lambda k: agree_at_start(ts[k], k, cfg)) == {k: [0, 1, 2, 3] for k in range(4)}
    ts, _ = _ranks(timeout_s=STARTUP_S)
    out = _run_all(ts, lambda k: ts[k].gather_values("resume", str(k % 2), timeout_s=STARTUP_S))
    assert out == {k: {0: "0", 1: "1", 2: "0", 3: "1"} for k in range(4)}
