"""Ask a served judge about every row of a split (benchmarks/judge_table1/sets.py) and record its score.

    python benchmarks/judge_table1/score.py --url http://127.0.0.1:8012/v1 --model qwen2.5-coder-0.5b-instruct \\
        --split dev --out results/judge_table1/scores.jsonl

The judge is dgrpo's own client (:class:`dgrpo.verify.judge.OpenAIJudge`, the prompt of
:func:`dgrpo.verify.judge.build_messages`) with ``threshold`` set: one token, greedy, the first token's
``top_logprobs`` give p(yes) / (p(yes) + p(no)), which is recorded as ``score`` (the decision at any
threshold is ``score >= threshold``, exactly as the judge defense decides with that threshold). One line
per judgment, appended as it comes, so a stopped run resumes after its last line (rows already scored are
skipped; a ``failed`` judgment, no answer from the server, is not written, so a resumed run asks again, and three
in a row stop the run). ``--per-set N`` judges at most N evenly spaced rows of each set (``--sets`` to choose sets,
``--keys`` to judge only listed rows, ``--rows`` to read rows from a file instead of sets.py); ``--fill N`` judges evenly spaced rows not yet judged under ``--tag`` until
N rows of each set are. ``--granularity step`` asks about one step at a time (dgrpo.verify.judge_steps; a step
prompt such as ``--prompt step``): ``score`` is the lowest step score and ``steps`` records every step asked with
its score.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sets as judge_sets  # noqa: E402


def spaced(rows: list, limit: int | None) -> list:
    """``limit`` evenly spaced items of ``rows`` (all when None or ≥ their number, none when 0)."""
    if limit is None or limit >= len(rows):
        return rows
    if limit <= 0:
        return []
    step = len(rows) / limit
    return [rows[int(i * step)] for i in range(limit)]


def pick(rows: list[dict], per_set: int | None, fill: int | None, judged: set[str]) -> list[dict]:
    """The rows to ask about, set by set: ``per_set`` evenly spaced rows (all when None), or with ``fill`` evenly
    spaced rows whose key is not in ``judged`` until ``fill`` rows of the set are judged (none when already)."""
    chosen = []
    for s in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == s]
        if fill is None:
            chosen += spaced(mine, per_set)
        else:
            fresh = [r for r in mine if r["key"] not in judged]
            chosen += spaced(fresh, max(0, fill - (len(mine) - len(fresh))))
    return chosen


def main(argv=None) -> int:
    from dgrpo.verify.judge import JudgeConfig, OpenAIJudge

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True, help="the name the server serves")
    ap.add_argument("--split", choices=("dev", "heldout"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", default=None)
    ap.add_argument("--per-set", type=int, default=None)
    ap.add_argument("--right-only", nargs="*", default=["honest_sampled"],
                    help="sets of which only rows with the right answer are judged (their rejection costs reward)")
    ap.add_argument("--gsm8k", type=Path, default=None)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--stop-at", type=float, default=None, help="Unix time after which no new judgment starts")
    ap.add_argument("--prompt", default="plain", help="the judge prompt (dgrpo.verify.judge_prompts.PROMPTS)")
    ap.add_argument("--tag", default="", help="a label stored with each score (the prompt or server variant)")
    ap.add_argument("--split-version", choices=("v1", "v2"), default="v1", help="which dev / held-out split (sets.py)")
    ap.add_argument("--fill", type=int, default=None,
                    help="judge evenly spaced not-yet-judged rows of each set until N of its rows carry this tag")
    ap.add_argument("--granularity", choices=("completion", "step"), default="completion",
                    help="step: one question per step, the lowest step score is the completion's (dgrpo.verify.judge_steps)")
    ap.add_argument("--max-steps", type=int, default=8, help="with --granularity step: steps asked at most per completion")
    ap.add_argument("--keys", type=Path, default=None, help="a file of row keys, one a line: judge only those rows")
    ap.add_argument("--rows", type=Path, nargs="+", default=None,
                    help="jsonl files of rows with sets.py's fields (set, split, key, question, text, honest, right): "
                         "judge these instead of sets.py's (--gsm8k and --split-version are then not used)")
    args = ap.parse_args(argv)
    if args.rows is not None:
        rows = [json.loads(line) for path in args.rows for line in path.read_text().splitlines()]
    else:
        rows = judge_sets.load(args.gsm8k, split=args.split_version)
    rows = [r for r in rows if r["split"] == args.split]
    if args.sets:
        rows = [r for r in rows if r["set"] in args.sets]
    rows = [r for r in rows if r["set"] not in args.right_only or r["right"]]
    if args.keys is not None:
        wanted = set(args.keys.read_text().split())
        rows = [r for r in rows if r["key"] in wanted]
    done = set()
    if args.out.exists():
        done = {(d["key"], d["tag"]) for d in map(json.loads, args.out.read_text().splitlines())}
    chosen = pick(rows, args.per_set, args.fill, {k for k, t in done if t == args.tag})
    todo = [r for r in chosen if (r["key"], args.tag) not in done]
    print(f"{len(chosen)} rows chosen, {len(todo)} to judge", file=sys.stderr, flush=True)
    judge = OpenAIJudge(JudgeConfig(args.url, args.model, api_key_env=None, timeout_s=args.timeout_s, max_retries=1,
                                    max_concurrency=1, max_tokens=1, threshold=0.5, prompt=args.prompt,
                                    granularity=args.granularity, max_steps=args.max_steps))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start, failures = time.perf_counter(), 0
    with args.out.open("a") as f:
        for i, r in enumerate(todo):
            if args.stop_at is not None and time.time() > args.stop_at:
                print(f"stopped at the deadline after {i} of {len(todo)}", file=sys.stderr, flush=True)
                break
            j = judge.judge(r["question"], r["text"])
            if j.status == "failed":  # server trouble, not a judgment: not recorded, so a resumed run asks again
                failures += 1
                print(f"{r['key']}: {j.reason}", file=sys.stderr, flush=True)
                if failures == 3:
                    print("3 failures in a row: stopping (is the server up?)", file=sys.stderr, flush=True)
                    return 1
                continue
            failures = 0
            row = {"key": r["key"], "set": r["set"], "split": r["split"], "honest": r["honest"], "right": r["right"],
                   "tag": args.tag, "status": j.status, "score": j.score, "seconds": round(j.seconds, 3), "reason": j.reason}
            if args.granularity == "step":
                row["steps"] = [[text, score] for text, score in j.steps]
            f.write(json.dumps(row) + "\n")
            f.flush()
            if i % 20 == 19:
                print(f"{i + 1}/{len(todo)} {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    judge.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
