"""One two-faced or withholding rank at start-up cannot split the swarm nor get an honest rank blamed (issue 31,
must-have 5; review r31f H4, H10, H6, H9). 4 ranks on loopback with the roster file; rank 3 attacks.

Each case: every rank stops before training (exit 3, no round in the metrics), and every honest rank's one error
line names node 3: the ranks start together or not at all (the ready barrier, transports/startready.py).
"""

import pytest
from distributed_helpers import RELATIVE, launch
from test_store_attacks import ARGS, _roster, one_error_line


def _run(tmp_path, tiny_model_dir, scenario, *extra):
    args = ["run", RELATIVE, f"model.name={tiny_model_dir}", *ARGS, *_roster(tmp_path), f"out_dir={tmp_path}", "name=d",
            "swarm.transport=distributed", *extra]
    return launch(4, args, scenario=scenario, timeout=120, log_dir=str(tmp_path))


def _trained(tmp_path) -> bool:
    metrics = tmp_path / "d" / "metrics.jsonl"
    return metrics.exists() and any('"train/' in line for line in metrics.read_text().splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["continue", "abort"])
def test_a_second_signed_start_up_record_shown_to_one_rank_stops_every_rank_naming_its_signer(tmp_path, tiny_model_dir,
                                                                                            policy):
    """H4: rank 3's server shows node 0 a second start-up record it signed (same values, another launch nonce).
    Before, every check passed, node 0 held another launch id than nodes 1-2 and both sides trained on, refusing
    each other's messages as ``run`` (exit codes [0, 0, 0, 0]). Now each rank's signed ready confirmation quotes
    the records it read; node 3's two records are a signed proof, and every honest rank stops naming node 3."""
    results = _run(tmp_path, tiny_model_dir, "startsplit:3:0", f"swarm.on_peer_failure={policy}")
    assert [r.returncode for r in results][:3] == [3, 3, 3], [r.output[-2000:] for r in results]
    for r in results[:3]:
        line = one_error_line(r.output)
        assert "node 3 signed two different start-up records for this launch" in line, (r.rank, line)
        assert "node 0 " not in line.replace("read by node 0", "") or r.rank == 0, (r.rank, line)
    assert not _trained(tmp_path)


@pytest.mark.slow
def test_a_start_up_record_withheld_from_one_rank_stops_every_rank_naming_who_withheld_it(tmp_path, tiny_model_dir):
    """H10: rank 3's server never serves node 1 its start-up record. Before, nodes 0 and 2 passed and trained on
    while node 1 waited startup_timeout_s and was expelled as `missing payload` (exit codes [0, 3, 0, 0]). Now nobody
    starts round 0 before every rank confirmed: node 1 stops naming node 3, and nodes 0 and 2 stop quoting node 1's
    signed reason, never calling node 1 silent."""
    results = _run(tmp_path, tiny_model_dir, "withhold:3:1:^startup/data/")
    assert [r.returncode for r in results][:3] == [3, 3, 3], [r.output[-2000:] for r in results]
    assert "node 3 sent nothing for exchange 'startup'" in one_error_line(results[1].output)
    for r in (results[0], results[2]):
        line = one_error_line(r.output)
        assert "node 1 stopped at start-up (node 3 sent nothing for exchange 'startup'" in line, (r.rank, line)
        assert "node 1 sent nothing" not in r.output and "node 1 is out" not in r.output, r.output[-2000:]
    assert not _trained(tmp_path)


@pytest.mark.slow
def test_a_ready_confirmation_withheld_from_one_rank_reaches_it_through_its_peers(tmp_path, tiny_model_dir):
    """The last start-up value: rank 3's server never serves node 1 its ready confirmation. Node 1 takes node 3's
    signed confirmation from a peer that holds them all (``ready/all``), so every rank starts round 0 and trains
    the two rounds with all four nodes; nobody is expelled or named."""
    results = _run(tmp_path, tiny_model_dir, "withhold:3:1:^ready/data/")
    assert [r.returncode for r in results] == [0, 0, 0, 0], [r.output[-2000:] for r in results]
    assert not any("is out of the swarm" in r.output or "sent nothing" in r.output for r in results)
    from dgrpo.metrics.logger import read_metrics

    records = read_metrics(tmp_path / "d")
    assert [r.get("swarm/messages") for r in records] == [8, 8, None]


@pytest.mark.slow
def test_a_two_faced_check_in_view_stops_every_rank_naming_its_signer(tmp_path, tiny_model_dir):
    """H6: rank 2 starts 7 s late (startup_timeout_s=4); rank 3 votes the true view [2] but its server shows node 1 a
    view, signed by node 3, saying nobody is absent. Node 0 counts [2] three times and goes on; node 1 holds node
    3's two signed views and no quorum. Before, node 1 stopped naming nobody and node 0 then stopped calling honest
    node 1 silent at exchange 'role'. Now node 1's line names node 3 (its two signed views: the proof) and node 0
    quotes node 1's signed reason."""
    results = _run(tmp_path, tiny_model_dir, "late:2:7,twoview:3:1", "swarm.startup_timeout_s=4")
    assert [r.returncode for r in results][:2] == [3, 3], [r.output[-2000:] for r in results]
    said = "node 3 signed 2 different views of who joined ([[], [2]], both verify under node 3's key"
    assert one_error_line(results[1].output).startswith(f"dgrpo: error: {said}"), results[1].output[-2000:]
    line = one_error_line(results[0].output)
    assert f"node 1 stopped at start-up ({said}" in line and "node 1 sent nothing" not in line, line
    assert not _trained(tmp_path)


@pytest.mark.slow
def test_a_two_faced_role_stops_every_rank_naming_its_signer(tmp_path, tiny_model_dir):
    """H9: rank 3's server serves node 0 its role as ``attacker`` and nodes 1-2 as ``honest``, both signed with its
    key. Before, every rank stopped naming honest node 0 ("nodes [0] run with another honest") and blaming the store.
    Now every honest line names node 3: its two signed roles, quoted in the ranks' signed start-up records."""
    results = _run(tmp_path, tiny_model_dir, "tworole:3:0")
    assert [r.returncode for r in results][:3] == [3, 3, 3], [r.output[-2000:] for r in results]
    for r in results[:3]:
        line = one_error_line(r.output)
        assert "node 3 declared two different start-up roles, both signed by its key" in line, (r.rank, line)
        assert "run with another" not in line and "wrote over" not in line, line
    assert not _trained(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("signed", ["", "signed"])
def test_a_config_fingerprint_shown_differently_to_one_rank_stops_every_honest_rank_naming_its_server(tmp_path,
                                                                                                    tiny_model_dir,
                                                                                                    signed):
    """Review r31q Q2: rank 3's server serves node 2 its config fingerprint (``config/data/3``) as ``deadbeef``: the
    bare text (the reviewer's repro), or signed with node 3's key as it signs its real one. Before: exit codes
    [3, 3, 2, 3] after startup_timeout_s, node 2 alone said ``nodes [3] run another config`` (no signed notice) and
    nodes 0 and 1 named honest node 2 ``sent nothing for exchange 'startup'``. Now every honest rank's line names node
    3 (signed: its two signed fingerprints, read by node 2 and by the others; bare: node 2 names it, nodes 0 and 1
    quote node 2's signed reason), at the fingerprint exchange: startup_timeout_s=300 outlasts the launch's 150 s,
    so a rank that waited it out would be killed (-9) and fail here."""
    results = launch(4, ["run", RELATIVE, f"model.name={tiny_model_dir}", *ARGS, *_roster(tmp_path), f"out_dir={tmp_path}",
                         "name=d", "swarm.transport=distributed", "swarm.startup_timeout_s=300"],
                     scenario=f"serveother:3:2:config/data/3:deadbeef{':' + signed if signed else ''}", timeout=150,
                     log_dir=str(tmp_path))
    assert [r.returncode for r in results][:3] == [3, 3, 3], [r.output[-2000:] for r in results]
    lines = [one_error_line(r.output) for r in results[:3]]
    if signed:
        for k, line in enumerate(lines):
            assert "node 3 signed two different start-up values of exchange 'config'" in line, (k, line)
            assert "'deadbeef' read by node 2" in line, (k, line)
    else:
        said = "node 3 served a start-up value of exchange 'config' that its key did not sign"
        assert lines[2].startswith(f"dgrpo: error: {said}"), lines[2]
        for k in (0, 1):
            assert f"node 2 stopped at start-up ({said}" in lines[k], (k, lines[k])
    assert not any("sent nothing" in r.output or "run another config" in r.output for r in results[:3])
    assert not _trained(tmp_path)


@pytest.mark.slow
def test_a_check_in_view_shown_to_one_rank_alone_keeps_no_rank_short_of_a_quorum(tmp_path, tiny_model_dir):
    """Review r31r R1 (``x_viewonly:3:1:1:4``): rank 3 serves its signed check-in view to node 1 only (none in the
    store) and leaves node 1's challenges unanswered for 4 s, so node 1 sees it checked in last and finds the views of
    nodes 0, 2 and 3 equal before it votes. Before: node 1 never wrote its view, nodes 0 and 2 held two views each and
    stopped at their give-up (``the ranks' views of who is absent (node 0: [], node 2: []) did not agree``), nodes 1
    and 3 died in the group set-up: exit codes [3, 3, 3, 3], nobody named. Now node 1 writes and serves the view it
    decided on, and every rank trains."""
    results = _run(tmp_path, tiny_model_dir, "viewonly:3:1:1:4", "swarm.startup_timeout_s=20")
    assert [r.returncode for r in results] == [0, 0, 0, 0], [r.output[-2000:] for r in results]
    assert _trained(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("keys", ["roster", "unsafe"])
def test_a_second_launch_proved_to_one_rank_is_named_by_every_honest_rank(tmp_path, tiny_model_dir, keys):
    """Review r31r R2 (``x_twolaunch:3:2:1``): rank 3 proves a second launch nonce to node 2 and its true one to nodes 0
    and 1, and signs its check-in view, role, config value, config echo, start-up record and ready confirmation for
    each reader's launch (every value the same). Before: every rank stopped at the config echo naming an honest rank
    (``node 2's echo of exchange 'config' quotes a value of node 3 that node 3 never signed``; at node 2: ``node 0's
    echo ...; node 1's echo ...``), node 3 named by nobody. Now every honest rank's line names node 3 (its two
    launches, each answered under its key for a challenge bound to this start-up), and none names an honest rank."""
    args = ["run", RELATIVE, f"model.name={tiny_model_dir}", *ARGS, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed",
            *(_roster(tmp_path) if keys == "roster" else []), "swarm.startup_timeout_s=20"]
    results = launch(4, args, scenario="twolaunch:3:2:1", timeout=120, log_dir=str(tmp_path))
    assert [r.returncode for r in results][:3] == [3, 3, 3], [r.output[-2000:] for r in results]
    for r in results[:3]:
        line = one_error_line(r.output)
        assert "node 3 answered for two launches at start-up" in line, (r.rank, line)
        assert not any(f"node {k}'s" in line or f"nodes [{k}" in line for k in (0, 1, 2)), (r.rank, line)
        assert "never signed" not in line and "sent nothing" not in line, (r.rank, line)
    assert not _trained(tmp_path)
