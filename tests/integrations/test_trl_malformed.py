"""One malformed field of a worker's rollout is that completion's rejection, never the end of the training step:
a token id outside the vocabulary (IndexError in the scoring forward before), a negative one (OverflowError in
decoding), a seeds list one short (IndexError in Replay); and a completion longer than
``max_completion_length`` is rejected (TopK alone accepted it)."""

from __future__ import annotations

from dgrpo.integrations.generate import seeded_generate
from dgrpo.policy.sampling import SamplingParams
from dgrpo.verify import Replay, TopK

from tests.integrations.test_trl import PARAMS
from tests.integrations.test_trl_rollouts import _train


def _rejected(defense):
    return [(i, f"{v.defense}: {v.reason}") for i, v in enumerate(defense.verdicts) if not v.accepted]


def test_token_ids_outside_the_vocabulary_are_rejected_and_the_step_goes_on(tokenizer, tmp_path):
    eos = tokenizer.eos_token_id

    def bad_ids(workers, out, i):
        out["completion_ids"][i] = [999999 if i == 3 else -1] + out["completion_ids"][i][1:]

    trainer, workers, defense, seen, ids_seen = _train(tokenizer, tmp_path, bad_ids, checks=[TopK(k=10), Replay(PARAMS)],
                                                       steps=1)
    assert trainer.state.global_step == 1 and defense.seen == 8
    assert _rejected(defense) == [(3, "rollout: token id 999999 at position 0 out of range (vocabulary of "
                                      f"{len(tokenizer)})"),
                                  (7, f"rollout: token id -1 at position 0 out of range (vocabulary of {len(tokenizer)})")]
    assert ids_seen[3] == ids_seen[7] == [eos]  # handed to TRL as one masked filler token


def test_a_seeds_list_one_short_rejects_the_batch_with_its_reason(tokenizer, tmp_path):
    def short(workers, out, i):
        if i == len(out["completion_ids"]) - 1:
            out["seeds"] = out["seeds"][:-1]

    trainer, _, defense, _, _ = _train(tokenizer, tmp_path, short, checks=[TopK(k=10), Replay(PARAMS)], steps=1)
    assert trainer.state.global_step == 1
    assert _rejected(defense) == [(i, "rollout: 7 seeds for 8 completions") for i in range(8)]


def test_a_seed_that_is_not_an_integer_is_rejected(tokenizer, tmp_path):
    def text_seed(workers, out, i):
        out["seeds"][i] = "7"

    _, _, defense, _, _ = _train(tokenizer, tmp_path, text_seed, checks=[Replay(PARAMS)], steps=1)
    assert _rejected(defense) == [(3, "rollout: seed '7' is not an integer"), (7, "rollout: seed '7' is not an integer")]


def test_a_completion_longer_than_max_completion_length_is_rejected(tokenizer, tmp_path):
    """Sampled honestly but 4 tokens past the limit: every token is inside the top-k, so only the length shows it."""
    longer = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=PARAMS.max_new_tokens + 4)
    eos, box = tokenizer.eos_token_id, {}

    def too_long(workers, out, i):
        c = seeded_generate(box["model"], [out["prompt_ids"][i]], [out["seeds"][i]], longer, eos, eos)[0]
        assert len(c) == longer.max_new_tokens and eos not in c  # the tiny model rarely samples eos
        out["completion_ids"][i], out["logprobs"][i] = c, [0.0] * len(c)

    from tests.conftest import build_model
    box["model"] = build_model(len(tokenizer))
    _, _, defense, _, _ = _train(tokenizer, tmp_path, too_long, model=box["model"], steps=1)
    assert _rejected(defense) == [(i, "rollout: 14 tokens exceed GRPOConfig.max_completion_length=10") for i in (3, 7)]
