"""Chat prompts and oracle completions shared by the math tasks (paper §D.1).

SmolLM2-135M-Instruct almost never writes the ``<think>/<answer>`` format from a system prompt
alone (0 of 32 samples). Two worked examples as earlier chat turns plus the assistant turn opened
with ``<think>`` (a "prefill") raise the format rate to about 0.7 and the reward to about 0.2 on
single-digit problems, which gives GRPO a signal on CPU. Both are settings of the task config.
"""

from __future__ import annotations

MATH_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math problems. First reason step by step inside "
    "<think> </think> tags, writing each calculation as an equation, then give only the final "
    "number inside <answer> </answer> tags."
)

FEW_SHOT = (
    ("Ann has 3 pens. Ann buys 2 more pens. How many pens does Ann have now?",
     "<think>Ann starts with 3 pens and buys 2 more, so Ann has 3 + 2 = 5 pens.</think>\n<answer>5</answer>"),
    ("Max has 4 boxes with 3 toys in each. How many toys does Max have now?",
     "<think>There are 4 boxes with 3 toys each, so Max has 4 * 3 = 12 toys.</think>\n<answer>12</answer>"),
)

THINK_PREFIX = "<think>"


def math_chat(question: str, few_shot: int = 2, system_prompt: str = MATH_SYSTEM_PROMPT) -> list[dict]:
    """System prompt, ``few_shot`` worked examples as earlier turns, then the question.

    Raises:
        ValueError: more examples asked for than exist.
    """
    if not 0 <= few_shot <= len(FEW_SHOT):
        raise ValueError(f"few_shot must be between 0 and {len(FEW_SHOT)}, got {few_shot}")
    messages = [{"role": "system", "content": system_prompt}]
    for q, a in FEW_SHOT[:few_shot]:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": question})
    return messages


def math_oracle_completion(reasoning: str, answer: str, prefix: str = "") -> str:
    """A full-reward completion, without the part already given as prefill.

    The full text is ``<think>{reasoning}</think>\\n<answer>{answer}</answer>``; when the prompt
    ends with ``prefix`` (e.g. ``<think>``) the completion is what follows it.
    """
    full = f"<think>{reasoning}</think>\n<answer>{answer}</answer>"
    if not full.startswith(prefix):
        raise ValueError(f"prefix {prefix!r} does not start the completion")
    return full[len(prefix):]
