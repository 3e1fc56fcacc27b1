import time, sys, os, tempfile, functools
import torch
torch.set_num_threads(1)
import gguf
from transformers import AutoModelForCausalLM, AutoTokenizer
from dgrpo.policy.loading import gguf_path
from dgrpo.policy.converted import file_sha256
src = gguf_path()
fast = sys.argv[1] == "fast"
if fast:
    R, M = gguf.GGUFReader, gguf.get_tensor_name_map
    readers = {}
    def reader(path, mode="r"):
        k = (os.fspath(path), mode)
        if k not in readers: readers[k] = R(path, mode)
        return readers[k]
    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(None)(M)
c, w = time.process_time(), time.perf_counter()
tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
c1 = time.process_time()
model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
c2 = time.process_time()
d = tempfile.mkdtemp(dir="/tmp/h38f")
if getattr(model, "hf_quantizer", None) is not None:
    model.hf_quantizer.remove_quantization_config(model)
model.save_pretrained(d); tok.save_pretrained(d)
print(sys.argv[1], "tok", round(c1-c, 2), "model", round(c2-c1, 2), "all", round(time.process_time() - c, 2), "wall", round(time.perf_counter() - w, 2), open("/proc/loadavg").read().split()[:3])
for f in sorted(os.listdir(d)): print(f, file_sha256(os.path.join(d, f))[:16])
