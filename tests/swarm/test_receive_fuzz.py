"""A generated fuzz of the whole receive path (issue 13, point 5): bytes a peer posts → the distributed
transport's decode → the swarm's receive (signature, protocol, validation, re-encoding) → rewards.
No exception may escape, every refused message has a reason, every accepted one is a real slot."""

import dataclasses
import json

import pytest
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.swarm.identity import Roster, Signer, SignatureVerifier, generate_keys, run_context
from dgrpo.swarm.protocol import BanList, Protocol, ProtocolConfig, Schedule
from dgrpo.swarm.schedule import horizontal_prompts
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.framing import frame
from dgrpo.types import Message

SEED, NODES, B, G = 1, 2, 2, 4
CTX = run_context("fuzz", "fp")
COUNT = {"posted": 0, "received": 0}

ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=40)  # surrogates included
INTS = st.one_of(st.integers(-3, 1000), st.integers(-(2**70), 2**70))


def _world(tokenizer, model):
    task = ArithmeticTask(seed=0, n_train=8, n_val=2, few_shot=0)
    keys = generate_keys(NODES)
    pc = ProtocolConfig(enforce_length=True)
    protocol = Protocol(pc, Schedule("horizontal", NODES, B, G, SEED, task.train), 8,
                        {n: Signer(n, k, CTX) for n, k in keys.items()}, SignatureVerifier(Roster.of(keys), CTX), BanList())
    policy = Policy("tiny", model, tokenizer, SamplingParams(10, 1.0, 8))
    swarm = Swarm(task, {0: policy}, {}, {}, {}, {}, SEED, G, Limits(), "horizontal", protocol)
    transport = DistributedTransport(dist.HashStore(), 0, NODES, honest=[0, 1], timeout_s=0.1, max_messages=64)
    return task, keys, policy, swarm, transport


@st.composite
def raw_message(draw, task, tokenizer, keys, policy):
    """A message dict as a hostile peer could post it: any field any value, often close to valid."""
    prompts = [p.prompt_id for p in horizontal_prompts(task.train, B, SEED, 0)]
    node = draw(st.one_of(st.sampled_from([0, 1]), INTS))
    prompt = draw(st.one_of(st.sampled_from(prompts + [task.train[-1].prompt_id]), ANY_TEXT))
    index = draw(st.one_of(st.integers(-2, G + 1), INTS))
    text = draw(st.one_of(st.sampled_from(["<think>2 + 2 = 4</think>\n<answer>4</answer>", "hello world", ""]),
                          ANY_TEXT))
    if draw(st.booleans()):
        try:
            ids = encode_completion(tokenizer, text)
        except Exception:  # noqa: BLE001 - unencodable text: the receiver must cope with it too
            ids = [1, 2]
    else:
        ids = draw(st.lists(INTS, max_size=12))
    seed = draw(st.one_of(st.none(), st.just("bound"), INTS))
    if seed == "bound" and isinstance(node, int) and isinstance(index, int):
        try:
            seed = completion_seed(SEED, 0, node, prompt, index)
        except Exception:  # noqa: BLE001
            seed = 0
    tok = draw(st.sampled_from([policy.tokenizer_id, "Other:x:50000", ""]))
    raw = {"node": node, "round": draw(st.sampled_from([0, 0, 0, 1, -1])), "prompt_id": prompt, "index": index,
           "text": text, "token_ids": ids, "seed": seed if not isinstance(seed, str) else 0, "tokenizer": tok}
    how = draw(st.sampled_from(["sign_own", "sign_other", "sign_other_run", "unsigned", "junk_sig", "mangle"]))
    if how.startswith("sign") and isinstance(node, int) and not isinstance(node, bool) and isinstance(index, int):
        signer = node if how == "sign_own" and node in keys else draw(st.sampled_from(sorted(keys)))
        ctx = CTX if how != "sign_other_run" else run_context("other", "fp")
        try:
            msg = Message(**{**raw, "token_ids": tuple(ids)})
            raw = Signer(signer, keys[signer], ctx).sign(msg).to_dict()
        except Exception:  # noqa: BLE001 - a field the signer cannot encode: send it unsigned
            pass
    elif how == "junk_sig":
        raw["signature"] = draw(st.one_of(st.text(max_size=130), st.just("ab" * 64)))
        raw["context"] = draw(st.one_of(st.just(CTX), ANY_TEXT))
    elif how == "mangle":
        key = draw(st.sampled_from(sorted(raw)))
        raw[key] = draw(st.one_of(st.none(), st.booleans(), INTS, ANY_TEXT, st.lists(INTS, max_size=3), st.floats()))
    return raw


@pytest.mark.slow
def test_no_exception_escapes_the_receive_path_in_10000_generated_messages(tokenizer, model):
    task, keys, policy, swarm, transport = _world(tokenizer, model)
    slots = {(k, p.prompt_id, i) for k in range(NODES) for p in horizontal_prompts(task.train, B, SEED, 0)
             for i in range(k * G // NODES, (k + 1) * G // NODES)}

    @settings(max_examples=900, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(st.lists(raw_message(task, tokenizer, keys, policy), min_size=8, max_size=24),
           st.sampled_from(["json", "framed", "junk"]))
    def check(raws, wrap):
        body = json.dumps({"messages": raws}, allow_nan=True).encode()
        payload = {"json": body, "framed": frame(body), "junk": b"\xff" + frame(body)[:-3] + frame(body)}[wrap]
        messages = transport.decode(1, payload)
        COUNT["posted"] += len(raws)
        COUNT["received"] += len(messages)
        received = swarm.receive(policy, messages, 0)
        swarm.reward(received.rollouts)
        assert len(received.rollouts) + len(received.invalid) + received.copies == len(messages)
        assert all(reason and ":" in reason for _, reason in received.invalid)
        for r in received.rollouts:  # what is accepted is a signed, bound message of a real slot
            assert (r.sender, r.prompt_id, r.key[3]) in slots and r.seed == completion_seed(SEED, 0, *r.key[:1],
                                                                                           r.prompt_id, r.key[3])

    check()
    assert COUNT["received"] >= 10_000, COUNT  # messages that parsed and went through Swarm.receive
