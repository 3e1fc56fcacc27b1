"""A reporting node's round record ``rec{r}`` is parsed strictly and refused, never an exception (review r31f H7):
the rules of :mod:`dgrpo.training.peer_records`, then a 4-rank torch.distributed swarm whose node 3 posts ``[]``,
text and a lying record (before: every honest main crashed in turn, exit codes [1, 1, 1, 0])."""

import json
import math
import statistics

import pytest
from distributed_helpers import RELATIVE, comparable, launch

from dgrpo.metrics.logger import read_metrics
from dgrpo.training.peer_records import MAX_RECORD_BYTES, RecordRefused, parse_peer_record

MINE = {"round": 2, "swarm/messages": 8, "train/loss": 0.25, "eval/accuracy": 0.5, "eval/format_rate": 1.0,
        "eval/completion_tokens": 12.0, "eval/kl_to_start": 0.01, "eval/entropy": 1.5, "eval/n": 2,
        "attack/asr": 0.5, "attack/filler_repeats": None, "time/defense/reward_outlier": 0.01}
PEER = {**MINE, "train/loss": -0.5, "train/grad_norm": 3, "train/used": 8, "swarm/invalid": 1, "eval/accuracy": 1,
        "eval/kl_to_start": -0.02, "train/reward/node0": 0.9, "swarm/messages": 99, "defense/any/rejected": 4}


def body(**changes):
    return json.dumps({**PEER, **changes}).encode()


def test_a_well_formed_record_gives_only_the_keys_the_main_merges():
    got = parse_peer_record(body(), MINE, max_new_tokens=24)
    assert got == {"round": 2, "train/loss": -0.5, "train/grad_norm": 3.0, "train/used": 8, "swarm/invalid": 1,
                   "eval/accuracy": 1.0, "eval/format_rate": 1.0, "eval/completion_tokens": 12.0,
                   "eval/kl_to_start": -0.02, "eval/entropy": 1.5, "eval/n": 2, "attack/asr": 0.5,
                   "attack/filler_repeats": None, "time/defense/reward_outlier": 0.01}  # not its rewards nor counts


@pytest.mark.parametrize("raw, reason", [
    (b"[]", "record: not a JSON object but a JSON array"),
    (b"not json {", "record: Invalid JSON"),
    (b"null", "record: not a JSON object but a JSON null"),
    (body(round=1), "record: round is 1, not 2"),
    (body(round=True), "record: round: Input should be a valid integer"),
    (body(**{"eval/accuracy": 1.5}), "record: eval/accuracy: Input should be less than or equal to 1"),
    (body(**{"eval/accuracy": "0.5"}), "record: eval/accuracy: Input should be a valid number"),
    (body(**{"eval/accuracy": 1 / 3}), "record: eval/accuracy=0.3333333333333333 is no whole number of completions"),
    (body(**{"eval/n": 20}), "record: eval/n=20, but every node evaluates the same 2 prompts"),
    (body(**{"eval/entropy": float("inf")}), "record: eval/entropy: Input should be a finite number"),
    (body(**{"eval/completion_tokens": 25}), "record: eval/completion_tokens=25.0 exceeds sampling.max_new_tokens=24"),
    (body(**{"attack/asr": 2}), "record: attack/asr=2.0 is a rate above 1"),
    (body(**{"attack/other": 0.1}), "record: this round is evaluated, but its evaluation keys differ"),
    (body(**{"swarm/invalid": 9}), "record: swarm/invalid=9 exceeds the round's 8 messages"),
    (body(**{"train/used": 1.0}), "record: train/used: Input should be a valid integer"),
    (body(**{"time/defense/judge": 0.1}), "record: times of defenses the config does not run: ['time/defense/judge']"),
    (b" " * (MAX_RECORD_BYTES + 1), f"record: {MAX_RECORD_BYTES + 1} bytes, above the {MAX_RECORD_BYTES}"),
])
def test_a_malformed_or_impossible_record_is_refused_in_one_line(raw, reason):
    with pytest.raises(RecordRefused) as err:
        parse_peer_record(raw, MINE, max_new_tokens=24)
    assert str(err.value).startswith(reason) and "\n" not in str(err.value)


MERGED_NUMBERS = ("swarm/invalid", "eval/accuracy", "eval/format_rate", "eval/completion_tokens", "eval/kl_to_start",
                  "eval/entropy", "eval/n")  # the keys of PEER that merge_records sums or averages


@pytest.mark.parametrize("key", MERGED_NUMBERS)
def test_a_null_where_the_merge_needs_a_number_is_refused_and_named(key):
    """Review r31g J1: ``"eval/accuracy": null`` passed the schema and merge_records raised TypeError (fmean) in every
    honest main in turn; the same for every key the merge sums or averages. Now the record is refused in one line
    naming the key."""
    with pytest.raises(RecordRefused) as err:
        parse_peer_record(body(**{key: None}), MINE, 24)
    assert str(err.value).startswith(f"record: {key}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("key", [*MERGED_NUMBERS, "eval/greedy/accuracy", "train/loss", "train/used", "attack/asr",
                                 "time/reward", "time/defense/reward_outlier"])
@pytest.mark.parametrize("value", [None, "1", True, [], {}, float("nan"), float("inf"), -1, 10**30, 1e308, -1e308])
def test_whatever_a_merged_key_holds_the_record_is_refused_or_merges(key, value):
    """No value of any key the main reads makes merge_records raise, even posted by two colluding reporters: the
    parser refuses it (RecordRefused) or the merge of the main's record with both gives a finite number for every
    averaged key (checked against the mean by hand)."""
    from dgrpo.training.records import merge_records
    mine = {**MINE, "swarm/invalid": 0, "eval/greedy/accuracy": 0.5}
    try:
        got = parse_peer_record(body(**{"eval/greedy/accuracy": 0.5, key: value}), mine, 24)
    except RecordRefused:
        return
    out = merge_records({0: mine, 2: got, 3: got})
    assert out["eval/accuracy"] == pytest.approx((0.5 + 2 * got["eval/accuracy"]) / 3)
    assert out["swarm/invalid"] == 2 * got["swarm/invalid"] and out["eval/n"] == 6
    for k in ("eval/kl_to_start", "eval/entropy", "eval/completion_tokens", "attack/asr"):
        values = [v for v in (mine[k], got[k], got[k]) if v is not None]  # (an attack metric may be None: left out)
        assert out[k] == pytest.approx(sum(values) / len(values)) and math.isfinite(out[k]), k


@pytest.mark.parametrize("key", ["eval/kl_to_start", "eval/entropy", "attack/filler_repeats"])
@pytest.mark.parametrize("value", [1e308, -1e308])
def test_two_colluding_reporters_posting_1e308_are_refused_and_named(key, value):
    """Task of review L1's round: ``eval/kl_to_start`` and ``eval/entropy`` took any finite number (and a non-rate
    ``attack/*`` any finite number >= 0), so two reporters posting 1e308 made the merge's mean overflow
    (OverflowError in every honest main, statistics.fmean). Now each such record is refused in one line naming the
    key (``record``, no strike), and the main's record merges alone."""
    from dgrpo.training.records import merge_records
    mine = {**MINE, "attack/filler_repeats": 2.0}
    with pytest.raises(OverflowError):  # what the merge did with them
        statistics.fmean([mine[key], value, value])
    refused = []
    for _ in (2, 3):
        with pytest.raises(RecordRefused) as err:
            parse_peer_record(body(**{"attack/filler_repeats": 2.0, key: value}), mine, 24)
        refused.append(str(err.value))
    assert all(r.startswith(f"record: {key}: Input should be ") and "\n" not in r for r in refused), refused
    assert merge_records({0: mine}) == mine


def test_the_largest_values_a_record_may_hold_merge_to_a_finite_mean():
    """At the bounds (peer_records.MAX_ENTROPY, MAX_MEAN) any number of reporters merge to a finite mean."""
    from dgrpo.training.peer_records import MAX_ENTROPY, MAX_MEAN
    from dgrpo.training.records import merge_records
    top = {"eval/kl_to_start": MAX_MEAN, "eval/entropy": MAX_ENTROPY, "attack/filler_repeats": MAX_MEAN}
    mine = {**MINE, "attack/filler_repeats": 2.0}
    got = parse_peer_record(body(**top), mine, 24)
    assert {k: got[k] for k in top} == top and MAX_ENTROPY == pytest.approx(22.18, abs=0.01)
    out = merge_records({0: mine, **{k: got for k in range(1, 1000)}})
    assert out["eval/kl_to_start"] == pytest.approx((0.01 + 999 * MAX_MEAN) / 1000)
    assert out["attack/filler_repeats"] == pytest.approx((2 + 999 * MAX_MEAN) / 1000)
    for key in ("eval/kl_to_start", "eval/entropy", "attack/filler_repeats"):  # just past the bound: refused
        with pytest.raises(RecordRefused, match=f"record: {key}: Input should be less than or equal to"):
            parse_peer_record(body(**{**top, key: top[key] * (1 + 1e-9)}), mine, 24)


def test_evaluation_keys_must_match_the_rounds_evaluation():
    """Every node evaluates the same rounds (one config): a record without them in an evaluated round, or with them
    in another, is refused (merge_records read them unchecked: KeyError in the means)."""
    no_eval = {k: v for k, v in PEER.items() if not k.startswith(("eval/", "attack/"))}
    with pytest.raises(RecordRefused, match="missing .*eval/accuracy"):
        parse_peer_record(json.dumps(no_eval).encode(), MINE, 24)
    mine = {k: v for k, v in MINE.items() if not k.startswith(("eval/", "attack/"))}
    with pytest.raises(RecordRefused, match="this round is not evaluated.*unexpected .*eval/accuracy"):
        parse_peer_record(body(), mine, 24)
    assert parse_peer_record(json.dumps(no_eval).encode(), mine, 24)["train/loss"] == -0.5


@pytest.mark.slow
def test_four_ranks_a_reporting_node_posting_junk_records_is_named_and_no_honest_rank_exits(
        tmp_path, tiny_model_dir, tiny_model_dir_b):
    """Heterogeneous swarm, node 3 declared honest (a reporting node) posts ``[]`` as rec0, text as rec1, its record
    with ``"eval/accuracy": null`` as rec2 (review r31g J1: every honest main crashed in turn, TypeError, exit codes
    [1, 1, 1, 0]) and a record whose accuracy no count gives as rec3 (the final evaluation). Every rank ends 0; each
    record is named in peers.jsonl under node 3; the logged evaluation is the mean of nodes 0-2's own (node 3's left
    out)."""
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = ["run", RELATIVE, models, "swarm.nodes=4", "swarm.mode=vertical", "swarm.prompts_per_round=4", "rounds=3",
            "threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=1", "eval.n_prompts=2",
            "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.unsafe_key_exchange=true",
            f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"]
    results = launch(4, args, scenario="rec:3:list+text+null+lie", timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    records = read_metrics(tmp_path / "d")
    assert [r["round"] for r in records] == [0, 1, 2, 3]
    for rec in records:
        per_node = [rec[f"eval/accuracy/node{k}"] for k in range(3)]
        assert "eval/accuracy/node3" not in rec and "train/loss/node3" not in rec
        assert rec["eval/n"] == 3 * 2  # three honest reporters, 2 prompts each
        assert rec["eval/accuracy"] == pytest.approx(statistics.fmean(per_node))
    lines = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    named = {line["round"]: line["records"] for line in lines if "records" in line}
    assert set(named) == {0, 1, 2, 3} and all(set(n) == {"3"} for n in named.values())
    assert named[0]["3"].startswith("record: not a JSON object but a JSON array")
    assert named[1]["3"].startswith("record: Invalid JSON")
    assert named[2]["3"].startswith("record: eval/accuracy: Input should be a valid number")
    assert named[3]["3"].startswith("record: eval/accuracy=0.3333333333333333 is no whole number")
    assert all(line["peers"]["3"]["transport"] == {"record": 1} for line in lines if "records" in line)
    assert "left out of the metrics" in results[0].output


def _withholding_run(tmp_path, tiny_model_dir, tiny_model_dir_b, modes: str, policy: str, rounds: int,
                     scenario: str | None = None):
    """A heterogeneous 4-rank swarm (timeout_s=10: W=3.5 s, record_s=1.75 s) whose node 3 posts its records as
    ``modes`` (record_scenarios), or plays ``scenario``; every rank's result, the metrics and the peers.jsonl
    lines."""
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = ["run", RELATIVE, models, "swarm.nodes=4", "swarm.mode=vertical", "swarm.prompts_per_round=4", f"rounds={rounds}",
            "threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=1", "eval.n_prompts=2",
            "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.unsafe_key_exchange=true",
            "swarm.timeout_s=10", f"swarm.on_peer_failure={policy}", f"out_dir={tmp_path}", "name=d",
            "swarm.transport=distributed"]
    results = launch(4, args, scenario=scenario or f"rec:3:{modes}", timeout=240, log_dir=str(tmp_path))
    lines = [json.loads(line) for line in (tmp_path / "d" / "peers.jsonl").read_text().splitlines()]
    return results, read_metrics(tmp_path / "d"), lines


def _nobody_failed(results, lines):
    for r in results:
        assert "declared failed" not in r.output and "out of the swarm" not in r.output, r.output[-3000:]
    assert all(p.get("transport", {}).get("missing payload") is None for line in lines
               for p in line["peers"].values())


@pytest.mark.slow
def test_four_ranks_a_reporter_withholding_its_records_gets_nobody_expelled(tmp_path, tiny_model_dir, tiny_model_dir_b):
    """Review r31g J5: node 3 (a reporting node) never posts rec{r}. Before, the main waited for it until the round's
    end, posted its next payload past its peers' window and was expelled, then the next main: exit codes [3, 3, 0, 0].
    Now the main reads records for W / 2: every rank ends 0, node 0 stays main (it writes every round's record, node
    3's left out), nobody is accused, and node 3 is named ``missing record`` in every round."""
    results, records, lines = _withholding_run(tmp_path, tiny_model_dir, tiny_model_dir_b, "none", "continue", 3)
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert [r["round"] for r in records] == [0, 1, 2, 3]
    assert all("eval/accuracy/node3" not in rec and "eval/accuracy/node0" in rec for rec in records)
    assert all(rec.get("swarm/nodes_alive", 4) == 4 for rec in records)
    named = {line["round"]: line["records"] for line in lines if "records" in line}
    assert sorted(named) == [0, 1, 2, 3]
    assert all(n["3"].startswith("missing record: none came for exchange 'rec") for n in named.values())
    assert all(line["peers"]["3"]["transport"] == {"missing record": 1} for line in lines if "records" in line)
    assert "node 3's record of round 0 left out of the metrics: missing record" in results[0].output
    _nobody_failed(results, lines)


@pytest.mark.slow
def test_four_ranks_a_withheld_final_record_under_abort_fails_nobody(tmp_path, tiny_model_dir, tiny_model_dir_b):
    """Review r31g J7: node 3 withholds only its final record (rec2, after the last round's evaluation) under
    ``on_peer_failure=abort``. Before, the main aborted (exit 3) after a complete run, the final evaluation never
    reached metrics.jsonl, and its peers, done waiting at ``done``, named node 0. Now every rank ends 0, the final
    record (round 2) is written without node 3's, node 3 is named ``missing record`` for it alone, and nobody
    names the main at ``done``."""
    results, records, lines = _withholding_run(tmp_path, tiny_model_dir, tiny_model_dir_b, "honest+honest+none",
                                               "abort", 2)
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert [r["round"] for r in records] == [0, 1, 2]
    assert "eval/accuracy/node3" in records[1] and "eval/accuracy/node3" not in records[2]
    assert records[2]["eval/n"] == 3 * 2  # the final evaluation of nodes 0-2, 2 prompts each
    named = {line["round"]: line["records"] for line in lines if "records" in line}
    assert named == {2: {"3": "missing record: none came for exchange 'rec2' in time"}}
    assert not any("exchange 'done'" in r.output for r in results), [r.output[-2000:] for r in results]
    _nobody_failed(results, lines)


def _named(lines):
    """(round, node, reason) of every transport entry in the main's peers.jsonl lines, and (round, reader, node, reason)
    of every refusal the other ranks relayed (``views``)."""
    named = {(line["round"], node, why) for line in lines for node, p in line["peers"].items() for why in p["transport"]}
    views = {(line["round"], reader, node, why) for line in lines for reader, view in line.get("views", {}).items()
             for node, whys in view.items() for why in whys}
    return named, views


@pytest.mark.slow
def test_four_ranks_a_reporter_late_with_its_records_and_rounds_gets_only_itself_named(
        tmp_path, tiny_model_dir, tiny_model_dir_b):
    """Review r31g Z5l: node 3 (a reporting node) posts each record rec{r} 8.5 s (0.85 x timeout_s) late, so it
    enters each next round that late too. The main reads records for record_s = W / 2 (1.75 s), so it posts r1 that
    much after nodes 1-2, who named honest node 0 ``late`` in round 1 (over W / 2 after their own post; on an older
    main, with a longer record wait, ``missing payload``, accused by 2 of 3 every round: named like the attacker).
    Now the main's signed wait note of rec0 (naming node 3) allows it record_s more: only node 3 is named (missing
    record in round 0, missing payload in round 1, where nodes 0-2 expel it), the honest ranks end 0, every exchange
    ends within timeout_s, and the metrics and peers.jsonl equal those of the same swarm whose node 3 posts no record
    and is gone after its round-0 relay (``quit``)."""
    (tmp_path / "ref").mkdir()
    (tmp_path / "late").mkdir()
    _, want, want_lines = _withholding_run(tmp_path / "ref", tiny_model_dir, tiny_model_dir_b, "quit", "continue", 3)
    assert _named(want_lines) == ({(0, "3", "missing record"), (1, "3", "missing payload")},
                                  {(1, "1", "3", "missing payload"), (1, "2", "3", "missing payload")})
    results, records, lines = _withholding_run(tmp_path / "late", tiny_model_dir, tiny_model_dir_b, "late8.5",
                                               "continue", 3)
    assert [r.returncode for r in results] == [0, 0, 0, 3], results[0].output[-3000:]
    assert "node 3 was declared failed by its peers in exchange 'r1'" in results[3].output
    assert _named(lines) == _named(want_lines)  # (before: also (1, "1", "0", "late") and (1, "2", "0", "late"))
    assert lines == want_lines
    assert comparable(records) == comparable(want) and [r["round"] for r in records] == [0, 1, 2, 3]
    assert all(r["time/exchange"] < 10 for r in records if "time/exchange" in r)


@pytest.mark.slow
def test_four_ranks_a_reporter_trickling_its_record_heads_gets_nobody_expelled(tmp_path, tiny_model_dir,
                                                                              tiny_model_dir_b):
    """Review r31h F2: node 3 (a reporting node) serves the head of each of its records ``rec{r}`` a byte every
    0.5 s without end. Before, the main's read of it never returned (http.client's timeout is per recv): node 0
    was expelled by a quorum (its next payload never came), then node 1, and every rank hung (exit codes -9 when
    killed). Now the read ends by record_s (W / 2): every rank ends 0, node 0 stays main, node 3's record is left
    out and named ``missing record`` in every round (its server served it too slowly), nobody honest is named,
    and every round's exchange ends within timeout_s + 0.25 s."""
    results, records, lines = _withholding_run(tmp_path, tiny_model_dir, tiny_model_dir_b, "", "continue", 3,
                                               scenario="serve:3:rechead")
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert [r["round"] for r in records] == [0, 1, 2, 3]
    assert all("eval/accuracy/node3" not in rec and "eval/accuracy/node0" in rec for rec in records)
    assert all(rec.get("swarm/nodes_alive", 4) == 4 for rec in records)
    assert max(rec["time/exchange"] for rec in records if "time/exchange" in rec) <= 10 + 0.25
    named = {line["round"]: line["records"] for line in lines if "records" in line}
    assert sorted(named) == [0, 1, 2, 3] and all(set(n) == {"3"} for n in named.values()), named
    assert all(n["3"].startswith("missing record: none came for exchange 'rec") for n in named.values())
    assert all(line["peers"].get(str(k), {}).get("transport", {}) == {} for line in lines for k in (0, 1, 2)), lines
    _nobody_failed(results, lines)
