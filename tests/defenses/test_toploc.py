"""The toploc defense on the tiny model: honest proofs built while sampling are accepted; a completion with a
spliced span, a proof of another completion or of another model's activations, or none at all are rejected;
the signature covers the proof. What passes, as measured: a one-token edit under its sample's proof (the
thresholds that absorb hardware noise absorb it), and any poison proved by prefilling it with the shared weights."""

import dataclasses
import json

import pytest
import torch

from dgrpo.config import load_config
from dgrpo.defenses import build_defense
from dgrpo.errors import ConfigError
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys, signed_header
from dgrpo.swarm.validation import parse_message
from dgrpo.types import Message, Rollout
from dgrpo.policy.proofs import ProofParams, build_proof, prefill_hidden, prove_by_prefill
from dgrpo.verify.toploc import proof_problem
from tests.conftest import build_model

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=16)
PROMPT = [5, 6, 7, 8, 9, 10]


@pytest.fixture()
def sampled(model, tokenizer):
    """12 completions of PROMPT with the hidden states their sampling computed, and their proofs."""
    eos = tokenizer.eos_token_id
    hidden = [[] for _ in range(12)]
    outs = sample(model, [PROMPT] * 12, list(range(12)), PARAMS, eos, eos, hidden=hidden)
    return outs, [torch.stack(h) for h in hidden], [build_proof(torch.stack(h)) for h in hidden]


def _defense(model, tokenizer, extra=""):
    cfg = load_config(overrides=["sampling.max_new_tokens=16", f"defenses=[{{kind: toploc{extra}}}]"])
    return build_defense(cfg.defenses[0], cfg, Policy("tiny", model, tokenizer, PARAMS), task=None)


def test_the_sampler_records_what_one_prefill_recomputes(model, tokenizer, sampled):
    outs, hidden, _ = sampled
    again = prefill_hidden(model, PROMPT, outs, tokenizer.eos_token_id)
    for ids, h, h2 in zip(outs, hidden, again):
        assert h.shape == h2.shape == (len(ids), 64) and h.dtype == torch.bfloat16
        # one bf16 step at most (the sampler's kernels sum in another order than the prefill's)
        assert (h.float() - h2.float()).abs().max() <= 2 ** -6 * h.float().abs().max()


def test_the_prefill_stops_at_the_output_embedding_with_its_exact_input(model, tokenizer, sampled):
    # a full forward's lm_head input, captured without stopping it: prefill_hidden's is the same, bit for bit
    outs, _, _ = sampled
    eos = tokenizer.eos_token_id
    rows = [PROMPT + o[:-1] for o in outs]
    width = max(map(len, rows))
    ids = torch.tensor([r + [eos] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    seen = []
    handle = model.lm_head.register_forward_pre_hook(lambda mod, args: seen.append(args[0].to(torch.bfloat16)))
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits
    handle.remove()
    assert full.shape == (12, width, len(tokenizer))  # the full forward did compute logits
    again = prefill_hidden(model, PROMPT, outs, eos)
    for i, (o, h) in enumerate(zip(outs, again)):
        assert torch.equal(h, seen[0][i, len(PROMPT) - 1 : len(PROMPT) - 1 + len(o)])


@pytest.mark.parametrize("packed", [True, False])
def test_the_updates_forward_serves_the_proof_check(model, tokenizer, sampled, monkeypatch, packed):
    """Shared proofs (issue 36): the hidden states group_logits keeps from the update's own forward (packed or
    padded path) are the prefill's to a bf16 step, and check the honest proofs; its logits are unchanged."""
    import dgrpo.policy.scoring as scoring

    outs, _, proofs = sampled
    eos = tokenizer.eos_token_id
    outs = [o[: 3 + i] for i, o in enumerate(outs)]  # unequal lengths (3..14): both paths have padding to skip
    proofs = prove_by_prefill(model, PROMPT, outs, eos)  # proofs of the cut completions (a prefill: honest here)
    monkeypatch.setattr(scoring, "_packable", lambda *a: packed)
    hidden: list = []
    with torch.no_grad():
        logits = scoring.group_logits(model, PROMPT, outs, eos, hidden=hidden)
        plain = scoring.group_logits(model, PROMPT, outs, eos)
    assert torch.equal(logits, plain)
    again = prefill_hidden(model, PROMPT, outs, eos)
    assert [h.shape for h in hidden] == [(len(o), 64) for o in outs]
    for h, h2, proof in zip(hidden, again, proofs):
        assert (h.float() - h2.float()).abs().max() <= 2 ** -6 * h2.float().abs().max()
        assert proof_problem(h, proof) is None
    assert proof_problem(hidden[0], proofs[1]) is not None  # and still tells another completion's proof apart


def test_shared_forward_judges_on_the_updates_forward_without_a_prefill(model, tokenizer, sampled, monkeypatch):
    """``shared_forward: true``: the same verdicts as the prefill defense, judged when the update reads the group,
    and the defense recomputes nothing itself (its own forward is made to fail)."""
    from dgrpo.defenses import defend
    from dgrpo.defenses.toploc import TOPLOCDefense
    from dgrpo.grpo.learner import GRPOParams, Learner

    outs, _, proofs = sampled
    eos = tokenizer.eos_token_id

    def rollouts():  # 10 honest (rewards differ: the group learns), one with another's proof, one without
        made = [Rollout("p", PROMPT, o, "", 0, reward=float(i % 2), proof=pr) for i, (o, pr) in enumerate(zip(outs[:10], proofs))]
        return made + [Rollout("p", PROMPT, outs[10], "", 0, reward=1.0, proof=proofs[11]),
                       Rollout("p", PROMPT, outs[11], "", 0, reward=0.0)]

    expected = [v.accepted for v in _defense(model, tokenizer).inspect(rollouts())]
    assert expected == [True] * 10 + [False, False]
    shared = _defense(model, tokenizer, ", shared_forward: true")
    assert (shared.stage, shared.reads_hidden) == ("logits", True)
    monkeypatch.setattr(TOPLOCDefense, "_recompute", lambda *a, **k: pytest.fail("the defense ran its own forward"))
    judged = rollouts()
    batch = defend([shared], Learner(model, GRPOParams(), eos, eos).score(judged), {})
    assert all(r.accepted for r in judged)  # nothing judged before the update reads the group
    for group in batch.groups:
        assert group.hidden is not None and len(group.hidden) == 12
    assert [r.accepted for r in judged] == expected
    assert judged[10].verdicts[0].defense == "toploc" and judged[11].verdicts[0].reason == "no TOPLOC proof"


def test_honest_accepted_edited_other_and_foreign_proofs_rejected(model, tokenizer, sampled):
    outs, _, proofs = sampled
    defense = _defense(model, tokenizer, ", action: zero")
    assert defense.stage == "rollouts" and defense.prover == ProofParams(32, 128)
    honest = [Rollout("p", PROMPT, o, "", 0, proof=pr) for o, pr in zip(outs, proofs)]
    spliced = list(outs[0])
    spliced[6:15] = outs[1][6:15]  # nine tokens of another sample written over it
    edited = list(outs[0])
    edited[3] = next(i for i in range(5, 400) if i not in (edited[3], tokenizer.eos_token_id))  # 2+2=5: one token
    other = build_model(len(tokenizer), seed=1)  # another model of the same shape
    foreign = prove_by_prefill(other, PROMPT, [outs[2]], tokenizer.eos_token_id)[0]
    assert spliced != outs[0] and len(outs[0]) == 16
    attacks = [Rollout("p", PROMPT, spliced, "", 0, proof=proofs[0]),  # edited after sampling, the sample's proof
               Rollout("p", PROMPT, outs[0], "", 0, proof=proofs[1]),  # the proof of another completion
               Rollout("p", PROMPT, outs[2], "", 0, proof=foreign),  # the proof of another model's activations
               Rollout("p", PROMPT, outs[3], "", 0)]  # none
    verdicts = defense.inspect(honest + attacks)
    assert [v.accepted for v in verdicts] == [True] * 12 + [False] * 4
    assert all(v.defense == "toploc" and v.action == "zero" for v in verdicts[12:])
    assert "does not match the hidden states of tokens 0.." in verdicts[12].reason
    assert verdicts[15].reason == "no TOPLOC proof"
    # what TOPLOC does not see: one token edited under the sample's own proof (here 10 of the 64 committed
    # exponents differ, 19 allowed; on this model such an edit passed at 14 of 15 positions, docs/verification.md),
    # and the spliced completion with a proof made by prefilling it with the same weights
    assert defense.inspect([Rollout("p", PROMPT, edited, "", 0, proof=proofs[0])])[0].accepted
    adaptive = prove_by_prefill(model, PROMPT, [spliced], tokenizer.eos_token_id)[0]
    assert defense.inspect([Rollout("p", PROMPT, spliced, "", 0, proof=adaptive)])[0].accepted


def test_malformed_proofs_are_rejected_with_their_reason(model, tokenizer, sampled):
    outs, hidden, proofs = sampled
    long = [t for o in outs for t in o[:-1]][:40]  # 40 tokens: two chunks of 32
    assert proof_problem(hidden[0], proofs[0] + "," + proofs[0])[1].startswith("TOPLOC proof has 2 chunks, the completion needs 1")
    assert proof_problem(hidden[0], "AAAA")[1] == "TOPLOC proof chunks are not 64-point polynomials"
    # a signed wire message may carry any JSON string: a lone surrogate made the library's binding raise
    # TypeError out of the defense (the round crashed); non-ASCII text is a rejection like any other junk
    for junk in ("\udcff" * 8, proofs[0][:-1] + "\udcff", "é" * 176):
        assert proof_problem(hidden[0], junk) == (0, "TOPLOC proof is not base64 proofs (a character outside ASCII)")
    rows = [Rollout("p", PROMPT, outs[0], "", 0, proof=proofs[0]), Rollout("p", PROMPT, outs[1], "", 0, proof="\udcff")]
    assert [v.accepted for v in _defense(model, tokenizer).inspect(rows)] == [True, False]
    two = prefill_hidden(model, PROMPT, [long], tokenizer.eos_token_id)[0]
    assert len(build_proof(two).split(",")) == 2 and proof_problem(two, build_proof(two)) is None
    with pytest.raises(ValueError, match=r"hidden must be \(n, H\)"):
        build_proof(two[0])


def test_the_signature_covers_the_proof_and_the_wire_carries_it(sampled):
    _, _, proofs = sampled
    keys = generate_keys(1)
    signer, verifier = Signer(0, keys[0], "run|cfg"), SignatureVerifier(Roster.of(keys), "run|cfg")
    msg = signer.sign(Message(0, 1, "p", 0, "x", (1, 2), 7, "tok", proof=proofs[0]))
    assert verifier.identify(msg) == (0, None)
    swapped = dataclasses.replace(msg, proof=proofs[1])  # a relay swapping the proof breaks the signature
    assert verifier.identify(swapped)[1] == "signature: no roster key verifies it"
    plain = Message(0, 1, "p", 0, "x", (1, 2), 7, "tok")
    assert "proof" not in signed_header(plain) and "proof" not in plain.to_dict()  # as before proofs existed
    back, why = parse_message(json.loads(json.dumps(msg.to_dict())))
    assert why is None and back == msg


def test_kind_parses_and_refuses_heterogeneous_swarms():
    cfg = load_config(overrides=["defenses=[{kind: toploc, topk: 64, chunk: 16}]"])
    assert (cfg.defenses[0].topk, cfg.defenses[0].chunk) == (64, 16)
    with pytest.raises(ConfigError, match="toploc defense needs a homogeneous swarm"):
        load_config(overrides=["defenses=[{kind: toploc}]", "swarm.models=[{name: a}, {name: b}, {name: c}, {name: d}]"])


def test_a_run_proves_while_sampling_and_the_matrix_measures_the_column(tmp_path, tiny_model_dir):
    """End to end on the tiny model: every honest message of a run carries a proof that validates; the
    injection attacker, proving its poisons by prefilling them, passes; so does every poison of the matrix's
    rows measured here, while top-k catches the injection."""
    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics
    from dgrpo.paper.matrix import run_matrix

    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=t", "rounds=2", "swarm.nodes=2",
               "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6", "eval.every=10",
               "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "swarm.malicious=[1]",
               "attack.kind=injection", "swarm.protocol.enforce_length=false", "defenses=[{kind: toploc}]"])
    assert rc == 0
    first = read_metrics(tmp_path / "t")[0]
    assert first["defense/received"] == 8 and first["defense/any/false_positive_rate"] == 0.0
    assert first["defense/poisoned_received"] == 4 and first["time/defense/toploc"] > 0  # it checked them all and
    assert first["defense/any/rejected"] == 0  # the adaptive attacker's prefill proofs validate
    result = run_matrix(tmp_path / "m", model=tiny_model_dir, n_honest=16, n_poisoned=4, attacks=["hail", "dos_written"],
                        defenses=["toploc", "topk"], max_new_tokens=8)
    assert result["honest"]["toploc"]["rejected"] == 0 and result["honest"]["toploc"]["n"] == 16
    for row in result["attacks"].values():
        assert row["detection"]["toploc"]["rejected"] == 0 and row["detection"]["toploc"]["n"] > 0
    assert result["attacks"]["hail"]["detection"]["topk"]["rejected"] > 0
