"""Tasks: prompts with oracle answers and a verifiable reward, one module per ``task.kind``."""
