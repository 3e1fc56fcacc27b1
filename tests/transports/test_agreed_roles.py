"""Who the honest nodes are over torch.distributed (review r31p P2): the agreed config's ``swarm.malicious``, never a
rank's own declaration (a malicious rank 0 that declared itself honest became the main rank and received every honest
node's round record: no honest node wrote metrics). No launch: ``rendezvous.agree_at_start`` on a stand-in."""

import logging

from dgrpo.config import load_config
from dgrpo.transports.fingerprint import config_fingerprint
from dgrpo.transports.rendezvous import agree_at_start


class _Ranks:
    """What ``gather_values`` returns at every rank: the roles ``declared`` (unsigned: no roster) and one config."""

    def __init__(self, declared: dict[int, str], cfg):
        self.declared, self.cfg = declared, cfg
        self.chan = type("Chan", (), {"keys": None, "nonce": "", "launches": {}})()

    def gather_values(self, tag, value, timeout_s=None):
        if tag == "role":
            return {n: f"{role}|" for n, role in self.declared.items()}
        return {n: config_fingerprint(self.cfg) for n in self.declared}


def test_the_honest_nodes_are_the_agreed_configs_whatever_a_rank_declares(caplog):
    cfg = load_config(None, ["swarm.nodes=4", "swarm.malicious=[0]", "attack.kind=injection"])
    truthful = {0: "attacker", 1: "honest", 2: "honest", 3: "honest"}
    assert agree_at_start(_Ranks(truthful, cfg), 1, cfg) == [1, 2, 3]
    assert "declared" not in caplog.text
    lying = {**truthful, 0: "honest", 2: "attacker"}  # (rank 0 claims honest; even an honest rank's odd word is void)
    with caplog.at_level(logging.WARNING):
        assert agree_at_start(_Ranks(lying, cfg), 1, cfg) == [1, 2, 3]  # (before: [0, 1, 3], node 0 the main rank)
    assert "node 0 declared its start-up role 'honest', but the agreed swarm.malicious=[0] says otherwise" in caplog.text
    assert "node 2 declared its start-up role 'attacker'" in caplog.text
