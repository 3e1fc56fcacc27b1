"""The ban policy runs in the recipe's round, not in the metrics (issue 32 review #3): ``round_record``
only records, and ``account`` (recipes/swarm_round.py, after ``round_metrics`` in ``close_round``) strikes, bans,
writes ``bans.json`` and ``peers.jsonl``."""

from __future__ import annotations

import json
from types import SimpleNamespace

from dgrpo.config import load_config
from dgrpo.recipes.swarm_round import account
from dgrpo.swarm.protocol import BanList
from dgrpo.training.records import PolicyReport, round_record
from dgrpo.types import Rollout, Verdict


def _fake_run(tmp_path, bans):
    cfg = load_config(overrides=["swarm.nodes=3", "swarm.group_size=3", "swarm.malicious=[2]", "attack.kind=injection",
                                 "defenses=[{kind: topk}]"])
    policy = object()
    return SimpleNamespace(cfg=cfg, task=SimpleNamespace(completion_prefix="<think>"), run_dir=tmp_path, owns_dir=True,
                           swarm=SimpleNamespace(protocol=SimpleNamespace(bans=bans), trained={0: policy},
                                                 policies={0: policy}, last_received={}),
                           transport=SimpleNamespace(rejected=[], peer_views={}, is_main=True, local_nodes=[0, 1, 2]))


def _report():
    """Node 2's two completions are rejected by top-k (2 strikes); node 1's one is accepted."""
    poison = [Rollout("p", [1], [5, 2], "x", 2, reward=1.0, label="poisoned", verdicts=[Verdict(False, "topk")])
              for _ in range(2)]
    return PolicyReport([Rollout("p", [1], [5, 2], "y", 1, reward=0.0), *poison])


def test_the_round_record_strikes_nobody_and_writes_no_peer_file(tmp_path):
    bans = BanList(after=2)
    rec = round_record(_fake_run(tmp_path, bans), 4, {0: _report()}, {"round": 1.0})
    assert rec["defense/topk/rejected"] == 2
    assert bans == BanList(after=2)  # no strike, no ban
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_rounds_accounting_strikes_bans_and_writes_both_files(tmp_path):
    bans = BanList(after=2)
    account(_fake_run(tmp_path, bans), 4, {0: _report()})
    assert dict(bans.strikes) == {2: 2} and bans.banned == {2: 4}  # 2 top-k rejections ≥ ban_after=2: banned in round 4
    saved = json.loads((tmp_path / "bans.json").read_text())
    assert saved["banned"] == {"2": 4} and saved["strikes"] == {"2": 2} and saved["round"] == 4
    (peers,) = [json.loads(line) for line in (tmp_path / "peers.jsonl").read_text().splitlines()]
    assert peers["round"] == 4 and peers["banned"] == {"2": 4}
    assert peers["peers"]["2"]["defense"] == {"topk": 2} and peers["peers"]["1"]["accepted"] == 1


def test_a_rank_of_several_processes_writes_its_own_peer_file_main_or_not(tmp_path):
    """Review r31j F5: in a swarm of several processes every process reporting an honest node writes its own
    ``peers.node{k}.jsonl``; only the main writes ``peers.jsonl`` (and ``bans.json``) besides."""
    run = _fake_run(tmp_path, BanList(after=2))
    run.transport.local_nodes, run.transport.is_main = [1], False
    account(run, 4, {0: _report()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peers.node1.jsonl"]
    (own,) = [json.loads(line) for line in (tmp_path / "peers.node1.jsonl").read_text().splitlines()]
    assert own["round"] == 4 and own["peers"]["2"]["defense"] == {"topk": 2}
    run.transport.is_main = True
    account(run, 5, {0: _report()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bans.json", "peers.jsonl", "peers.node1.jsonl"]
    assert [json.loads(x)["round"] for x in (tmp_path / "peers.node1.jsonl").read_text().splitlines()] == [4, 5]
