"""A truly heterogeneous swarm: a Llama node and a Qwen2 node with two different tokenizers exchange text.

The Qwen2 node is a tiny model written as a GGUF file (tests/tiny_gguf.py: Qwen2's pre-tokenizer, which
splits digits one by one, and eos <|im_end|> ≠ pad <|endoftext|>) and loaded as the packaged Qwen2.5-Coder
models are; the Llama node is the tests' tiny model with its own byte-level BPE (eos = pad)."""

from __future__ import annotations

import json

import pytest
from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
from dgrpo.policy.chat import encode_completion
from dgrpo.policy.loading import convert_gguf, load_policy
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams
from dgrpo.swarm.schedule import horizontal_slots
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.arithmetic import ArithmeticTask
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_qwen_dir(tmp_path_factory) -> str:
    """A tiny Qwen2 model converted from its GGUF file to a folder (as dgrpo caches the packaged models)."""
    src = tmp_path_factory.mktemp("qwen-gguf") / "tiny.gguf"
    write_tiny_gguf(src, seed=2)
    return str(convert_gguf(src, tmp_path_factory.mktemp("converted") / "tiny-qwen"))


def test_each_node_re_encodes_the_other_tokenizers_text(tiny_model_dir, tiny_qwen_dir):
    task = ArithmeticTask(seed=0, n_train=10, n_val=2, few_shot=0)
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=8)
    llama, qwen = (Policy(name, *load_policy(name, trainable=False), params) for name in (tiny_model_dir, tiny_qwen_dir))
    assert llama.tokenizer_id != qwen.tokenizer_id
    swarm = Swarm(task, {0: llama, 1: qwen}, {}, {}, {}, {}, 5, 4, Limits())
    prompts = task.train[:2]
    sent = swarm.write({k: horizontal_slots(prompts, 4, 2, k) for k in (0, 1)}, round_idx=0)
    messages = sent[0] + sent[1]
    differs = 0
    for node, policy in ((0, llama), (1, qwen)):
        received = swarm.receive(policy, messages, round_idx=0)
        assert received.invalid == [] and len(received.rollouts) == 8
        for msg, r in zip(messages, received.rollouts):
            assert r.text == msg.text and r.prompt_ids == policy.prompt_ids(task, task.train[0 if msg.prompt_id == prompts[0].prompt_id else 1])
            if msg.node == node:  # its own completion: the ids it sampled
                assert r.completion_ids == list(msg.token_ids)
            else:  # the other's: its text, encoded by this node's tokenizer
                assert r.completion_ids == encode_completion(policy.tokenizer, msg.text)
                differs += r.completion_ids != list(msg.token_ids)
    assert differs > 0  # the two vocabularies really disagree: passing ids through would train on other tokens
    # digits: Qwen2's pre-tokenizer splits "123" into three tokens, the Llama BPE does not have to
    assert len(qwen.tokenizer("123", add_special_tokens=False)["input_ids"]) == 3


def test_a_run_trains_both_architectures_with_lora(tmp_path, tiny_model_dir, tiny_qwen_dir):
    # a third node (Llama, malicious) sends full-reward poison: random models earn no reward themselves, and
    # a group needs reward variance for the honest Llama and Qwen nodes to have anything to learn from
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_qwen_dir}}}, {{name: {tiny_model_dir}}}]"
    rc = main(["run", f"out_dir={tmp_path}", "name=h", models, "rounds=2", "swarm.nodes=3", "swarm.group_size=3",
               "swarm.malicious=[2]", "attack.kind=injection", "swarm.protocol.enforce_length=false",
               "swarm.prompts_per_round=2", "sampling.max_new_tokens=6", "eval.every=1", "eval.n_prompts=2",
               "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lora_rank=4", "grpo.lr=0.01"])
    assert rc == 0
    records = read_metrics(tmp_path / "h")
    for rec in records[:2]:
        assert rec["swarm/messages"] == 6 and rec["swarm/invalid"] == 0
        for node in (0, 1):  # both honest nodes trained on groups holding the other architecture's text
            assert rec[f"train/used/node{node}"] > 0 and rec[f"train/grad_norm/node{node}"] > 0
    assert {"eval/accuracy/node0", "eval/accuracy/node1"} <= records[-1].keys()
    saved = [json.loads((tmp_path / "h" / "checkpoint" / f"node{n}" / "config.json").read_text())["model_type"] for n in (0, 1)]
    assert saved == ["llama", "qwen2"]
