"""Build the tiny random model of tests/conftest.py into /tmp/adaptive/tiny (the model of tiny/command.txt)."""
import sys

sys.path.insert(0, "tests")
from conftest import build_model, build_tokenizer  # noqa: E402

tok = build_tokenizer()
build_model(len(tok)).save_pretrained("/tmp/adaptive/tiny")
tok.save_pretrained("/tmp/adaptive/tiny")
