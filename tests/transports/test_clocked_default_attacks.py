"""Issue 31's cases on the default schedule (task u31g): ``swarm.protocol.schedule`` unset on torch.distributed is
``clock`` with ``round_s: auto`` (task h31d), but the store and copy tests (``test_store_attacks.py``,
``test_flood.py``, ``test_distributed.py``) pin the relative schedule. Here, 4 ranks on loopback with nothing pinned,
rank 3 plays one case: no honest rank exits, is struck, banned or expelled, rank 3 is named in ``peers.jsonl``, and
the metrics are the in-process run's where what rank 3 did leaves its own messages in (every key but ``time/*``)."""

import json

import pytest
from distributed_helpers import comparable, launch
from test_distributed import B2, COMMON, in_process

from dgrpo.metrics.logger import read_metrics

ARGS = ["swarm.nodes=4", *COMMON, B2, "rounds=2", "eval.every=10", "swarm.timeout_s=30", "swarm.startup_timeout_s=60",
        "swarm.on_peer_failure=continue", "swarm.protocol.ban_after=2"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir):
    return in_process(tmp_path_factory.mktemp("ref"), "in", [f"model.name={tiny_model_dir}", *ARGS])


@pytest.mark.slow
@pytest.mark.parametrize("scenario, named", [
    ("respell:3", "malformed"),          # its peers' messages with upper-case signatures, under its own key
    ("copies:3:16000", "copy"),          # copies of its own signed messages, up to its readers' byte cap
    ("accuse:3:1", "accusation"),        # a lone signed accusation of honest node 1
])
def test_a_case_of_issue_31_on_the_default_clock_leaves_the_clean_run(tmp_path, tiny_model_dir, reference, scenario,
                                                                    named):
    results = launch(4, ["run", f"model.name={tiny_model_dir}", *ARGS, f"out_dir={tmp_path}", "name=d",
                         "swarm.transport=distributed"], scenario=scenario, timeout=300, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert all("agreed round_s=" in r.output for r in results)  # (the default: the clock with round_s auto)
    assert "out of the swarm" not in "".join(r.output for r in results)
    log = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    assert named in log[0]["peers"]["3"]["transport"], log[0]
    assert all(p["banned"] == {} for p in log)
    honest = {k: v for line in log for n, p in line["peers"].items() if n in ("0", "1", "2")
              for k, v in p["rejected"].items()}  # (a re-spelled copy is `malformed` under `unsigned`: no signer's)
    assert set(honest) <= {"special token"}, honest  # (refused, never a strike: docs/protocol.md)
    assert comparable(read_metrics(tmp_path / "d")) == reference


@pytest.mark.slow
def test_a_rank_that_stretches_every_round_and_skips_one_is_named_by_every_honest_rank(tmp_path, tiny_model_dir):
    """task h31h: rank 3 proposes round_s=1e6 (clamped to swarm.timeout_s=30: every round lasts 30 s) and stalls
    25 s in round 1 (its signed skip notice served and honoured): before, both only in log lines; now every honest
    rank's own peers file names node 3 (``slow proposal`` in round 0, ``skip`` in round 1), no honest node is named
    by either rule, struck or banned, and every rank exits 0."""
    from dgrpo.swarm.protocol import NAMED

    results = launch(4, ["run", f"model.name={tiny_model_dir}", *ARGS, f"out_dir={tmp_path}", "name=d",
                         "swarm.transport=distributed"], scenario="roundest:3:1000000,stall:3:1:25", timeout=420,
                     log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert all("agreed round_s=30s, node 3's proposal" in r.output for r in results)
    assert "out of the swarm" not in "".join(r.output for r in results)
    for k in (0, 1, 2):
        log = [json.loads(line) for line in (tmp_path / "d" / f"peers.node{k}.jsonl").read_text().splitlines()]
        assert log[0]["peers"]["3"]["transport"].get("slow proposal") == 1, (k, log[0])
        assert log[1]["peers"]["3"]["transport"].get("skip") == 1, (k, log[1])
        named = {rule for line in log for n, p in line["peers"].items() if n != "3" for rule in p["transport"]}
        assert not named & NAMED and all(p["banned"] == {} for p in log), (k, log)
        honest = {r for line in log for n, p in line["peers"].items() if n in ("0", "1", "2") for r in p["rejected"]}
        assert honest <= {"special token"}, (k, honest)  # (refused, never a strike: docs/protocol.md)
