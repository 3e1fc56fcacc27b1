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
