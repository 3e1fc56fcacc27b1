"""A 4-rank launch (rank 3 malicious, the given scenario) whose three honest ranks must exit 0 and train every
round on one message set: the check of the split-swarm launch tests (review r31t T1 and its adaptive form)."""

from distributed_helpers import RELATIVE, launch
from peer_scenarios import views
from test_round_deadlines import COMMON


def assert_one_set_each_round(tmp_path, model_dir, scenario: str, rounds: int = 4, extra=()) -> list:
    """Launch the scenario for ``rounds`` rounds (``extra``: more overrides); fail naming the round and each honest
    rank's senders where the sets differ. Returns the ranks' results."""
    results = launch(4, ["run", RELATIVE, f"model.name={model_dir}", *COMMON, *extra, f"rounds={rounds}", "eval.every=10",
                         "eval.first=false", f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario=scenario, timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results]
    sets = views(tmp_path, range(3))
    assert [len(s) for s in sets] == [rounds] * 3
    for r in range(rounds):  # (each honest rank's message set of round r, as it trained on it)
        assert sets[0][r] == sets[1][r] == sets[2][r], (r, [sorted({m[0] for m in s[r]}) for s in sets])
    return results
