"""llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``, same options) without extra buffer types.

    python benchmarks/judge_table1/llama_server.py --model FILE.gguf --port 8012 ...

On this machine (a VM whose CPU reports AMX) llama-cpp-python 0.3.36 built with its defaults (native) puts Q4_K
weights into ggml's AMX buffer type and the first request dies with SIGILL on ``tileloadd`` (objdump of
libggml-cpu.so at the faulting address, 2026-12-05). llama.cpp's own ``use_extra_bufts`` model parameter
(``--no-repack`` in ``llama-server``) turns those buffer types off; llama-cpp-python does not expose it, so this
launcher sets it in the default model parameters and runs the server unchanged. The model's outputs are the
plain CPU kernels' (no repacking), nothing else differs.
"""

import runpy

import llama_cpp.llama_cpp as lib

_default = lib.llama_model_default_params


def _no_extra_bufts():
    params = _default()
    params.use_extra_bufts = False
    return params


lib.llama_model_default_params = _no_extra_bufts
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
