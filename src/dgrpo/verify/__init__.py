"""Framework-neutral verification of completions (step checker, judge client): standard library and third-party packages only, no other dgrpo module."""
