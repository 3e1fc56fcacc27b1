import pytest

from dgrpo.robust.voting import canonical_number, parsed_answer, vote_metrics


def test_canonical_number():
    assert canonical_number("54 cows") == "54"
    assert canonical_number("5.0") == canonical_number("5") == "5"
    assert canonical_number("1,234.50") == "2469/2"
    assert canonical_number("from 3 to -7") is None  # two numbers: a hedge is no vote
    assert canonical_number("x = -7") == "-7"
    assert canonical_number("none") is None


def test_parsed_answer_needs_the_format():
    assert parsed_answer("2 + 2 = 4</think>\n<answer>4 apples</answer>", "<think>") == "4"
    assert parsed_answer("no tags at all, 4") is None
    assert parsed_answer("<think>x</think><answer>seven</answer>") is None


def test_vote_metrics_with_ties_abstentions_and_conditional_hits():
    # K = 3 groups, P = 4 prompts
    answers = [["5", "7", None, "3"],
               ["5", "8", None, "4"],
               ["6", "9", None, "4"]]
    gold = ["5", "9", "1", "4.0"]
    hits = [[1.0, 1.0, 0.0, None],
            [0.0, 1.0, 0.0, None],
            [0.0, 0.0, 0.0, None]]
    m = vote_metrics(answers, gold, hits)
    # p0: 5 wins 2-1 (right); p1: three-way tie → group 0's 7 (wrong, although group 2 was right);
    # p2: nobody answered (abstain, wrong); p3: 4 wins 2-1 (right, "4.0" is 4)
    assert m["accuracy"] == 0.5 and m["abstain"] == 0.25
    assert m["group_accuracy"] == [0.25, 0.5, 0.5]
    # p3 is excluded (the ASR applies to none of its completions); payload majorities: p1 only (2 of 3)
    assert m["asr_vote"] == pytest.approx(1 / 3)
    assert m["asr_any"] == pytest.approx(2 / 3)
    assert m["group_asr"] == pytest.approx([2 / 3, 1 / 3, 0.0])


def test_payload_needs_a_strict_majority():
    # K = 2: one of two carrying the payload is a tie, not a majority
    m = vote_metrics([["1"], ["1"]], ["1"], [[1.0], [0.0]])
    assert m["asr_vote"] == 0.0 and m["asr_any"] == 1.0
    m = vote_metrics([["1"], ["1"], ["1"], ["1"]], ["1"], [[1.0], [1.0], [1.0], [0.0]])
    assert m["asr_vote"] == 1.0


def test_vote_metrics_shape_errors():
    with pytest.raises(ValueError, match="K ≥ 1"):
        vote_metrics([["1", "2"], ["1"]], ["1", "2"])
    with pytest.raises(ValueError, match="shape"):
        vote_metrics([["1"]], ["1"], [[1.0], [0.0]])
