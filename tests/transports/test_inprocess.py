"""The in-process transport implements the whole Transport protocol, as the distributed and hivemind ones do."""

import inspect

import pytest

from dgrpo.transports.base import Transport
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.hivemind import HivemindTransport
from dgrpo.transports.inprocess import InProcessTransport
from dgrpo.types import Message


def _members(protocol) -> set[str]:
    methods = {n for n, v in vars(protocol).items() if callable(v) or isinstance(v, property)}
    return {n for n in methods | set(protocol.__annotations__) if not n.startswith("_")}


def test_the_protocol_names_what_the_run_uses():
    assert _members(Transport) == {"local_nodes", "alive", "failed", "rejected", "carriers", "peer_views", "labels", "first_round",
                                   "verifier", "is_main",
                                   "all_gather", "gather_values", "agree", "collect_at_main", "late_records", "last_records",
                                   "check_startup", "starts_at", "exchanged_keys", "announce_stop", "close"}


@pytest.mark.parametrize("transport", [InProcessTransport, DistributedTransport, HivemindTransport])
def test_every_transport_implements_every_member(transport):
    methods = {n for n in _members(Transport) if callable(getattr(Transport, n, None)) or isinstance(getattr(Transport, n, None), property)}
    assert methods <= set(dir(transport))
    attributes = _members(Transport) - methods
    init = inspect.getsource(transport.__init__)
    assert all(f"self.{a}" in init for a in attributes)  # set for every instance


def test_in_process_every_node_is_here():
    t = InProcessTransport(3)
    msgs = {2: [Message(2, 0, "p", 0, "c", (1,), 1, "t")], 0: [Message(0, 0, "p", 1, "a", (1,), 2, "t"),
                                                             Message(0, 0, "q", 0, "b", (1,), 3, "t")]}
    assert [m.text for m in t.all_gather(msgs)] == ["a", "b", "c"]  # node order, then sending order
    assert (t.local_nodes, t.alive, t.failed, t.rejected, t.is_main, t.first_round) == ([0, 1, 2], {0, 1, 2}, {}, [], True, 0)
    assert t.agree("name", "run-1") == "run-1" and t.gather_values("resume", "4") == {0: "4"}
    assert t.collect_at_main("rec0", b"{}", [0, 1]) == {}  # nobody elsewhere to collect from
    assert t.late_records("rec0", [0, 1]) == {} and t.last_records({"rec0": [0, 1]}) == {"rec0": {}}
    t.close()
