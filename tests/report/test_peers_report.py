"""Per-peer accounting in the HTML report (issue 13, point 6): totals by sender, rule and defense."""

import json

from dgrpo.report import load_run
from dgrpo.report.data import peer_series, peer_totals
from dgrpo.report.page import render

ROUNDS = [
    {"round": 0, "peers": {"0": {"received": 4, "accepted": 4, "rejected": {}, "defense": {}, "duplicates": 0, "transport": {}},
                           "1": {"received": 7, "accepted": 3, "rejected": {"identity": 2, "seed": 2}, "defense": {"topk": 3},
                                 "duplicates": 1, "transport": {"schema": 1, "slow proposal": 1}},
                           "unsigned": {"received": 1, "accepted": 0, "rejected": {"signature": 1}, "defense": {},
                                        "duplicates": 0, "transport": {}}},
     "banned": {"1": 0}},
    {"round": 1, "peers": {"0": {"received": 4, "accepted": 4, "rejected": {}, "defense": {"topk": 1}, "duplicates": 0,
                                 "transport": {"skip": 2}},
                           "1": {"received": 4, "accepted": 0, "rejected": {"banned": 4}, "defense": {}, "duplicates": 0,
                                 "transport": {}}},
     "banned": {"1": 0}},
]


def test_the_report_shows_each_senders_refusals_and_rejections(defended_run):
    (defended_run / "peers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROUNDS))
    run = load_run(defended_run)
    totals = peer_totals(run)
    assert totals["1"] == {"received": 11, "accepted": 3, "rejected": {"identity": 2, "seed": 2, "banned": 4},
                           "defense": {"topk": 3}, "duplicates": 1, "transport": {"schema": 1, "slow proposal": 1},
                           "banned": 0}
    assert totals["0"]["defense"] == {"topk": 1} and totals["0"]["banned"] is None
    # (a skip notice and a slow proposal name their sender but refuse no message: not in the series' counts)
    assert peer_series(run) == {"0": ([0, 1], [0, 1]), "1": ([0, 1], [8, 4]), "unsigned": ([0], [1])}
    page = render([run])
    assert "Per-peer accounting" in page and "Per peer: messages refused or rejected" in page
    row = page[page.index("<td class=\"l\">node 1</td>"):].split("</tr>")[0]
    assert "<td>11</td><td>3</td>" in row and "banned 4, identity 2, seed 2" in row and "topk 3" in row
    assert "round 0" in row and "schema 1, slow proposal 1" in row
    assert "<td class=\"l\">unsigned</td><td>1</td><td>0</td>" in page


def test_a_run_without_peers_file_says_so(undefended_run):
    assert "no per-peer accounting in this run" in render([load_run(undefended_run)])
