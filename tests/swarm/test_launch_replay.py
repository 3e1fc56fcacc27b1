"""Issue 31, must-have 2, in whole in-process runs: a message signed in an earlier launch of the same run (same
name, same config, same roster keys: a rerun or a resume) is another launch's, dropped without a strike. Before,
both launches signed for ``<name>|<config fingerprint>``: an honest node's earlier message for a slot whose
content differed (the attacker had behaved otherwise there) was counted as ``share: duplicate`` against it."""

import dataclasses

from test_blame import _text, account
from test_route import COMMON

from dgrpo.config import load_config
from dgrpo.swarm.identity import write_keys
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots
from dgrpo.training.build import build_run


def _launch(tmp_path, model, folder):
    cfg = load_config(None, [f"model.name={model}", f"out_dir={tmp_path / folder}", "name=same", *COMMON,
                             "attack.kind=injection", f"swarm.protocol.roster={tmp_path / 'keys' / 'roster.json'}",
                             f"swarm.protocol.key_dir={tmp_path / 'keys'}", "swarm.protocol.ban_after=1"])
    run = build_run(cfg)
    prompts = horizontal_prompts(run.task.train, 2, cfg.seed, 0)
    return run, run.swarm.write({k: horizontal_slots(prompts, 4, 4, k) for k in run.swarm.hosted}, 0)


def test_an_honest_message_of_an_earlier_launch_of_the_same_run_is_dropped_without_a_strike(tmp_path, tiny_model_dir,
                                                                                               tokenizer):
    write_keys(tmp_path / "keys", 4)
    first, old = _launch(tmp_path, tiny_model_dir, "a")
    second, fresh = _launch(tmp_path, tiny_model_dir, "b")
    # node 0's round-0 messages of the earlier launch, for the same slots, with another content (there the attacker
    # had behaved otherwise, so node 0's weights and completions differed), signed by node 0's own key then
    earlier = [first.swarm.protocol.signers[0].sign(dataclasses.replace(m, **_text(tokenizer, f"<think>{i} + 1</think>")))
               for i, m in enumerate(old[0])]
    assert [m.key for m in earlier] == [m.key for m in fresh[0]] and all(m.signature for m in earlier)
    assert first.swarm.protocol.verifier.context != second.swarm.protocol.verifier.context  # one name and config
    swarm, policy = second.swarm, second.swarm.policies[1]
    honest = [m for n in sorted(fresh) for m in fresh[n]]
    swarm.carriers = {id(m): 3 for m in earlier}  # node 3 delivers the replays
    received = swarm.receive(policy, [*honest, *earlier], 0)
    rec, strikes = account(swarm, received, 0)
    assert len(received.rollouts) == 8  # every message of this launch accepted
    assert rec["0"]["accepted"] == 2 and rec["0"]["rejected"] == {"run": 2}  # node 0 signed them, in another launch
    assert all("launch" in reason for (m, reason) in received.invalid)
    assert rec["3"]["transport"] == {"run": 2} and strikes.get("0", 0) == 0 and swarm.protocol.bans.banned == {}
