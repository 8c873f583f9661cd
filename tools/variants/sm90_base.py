# tools/gpu_variants.sh spec: the tree against a base commit's wgmma family (the files below as
# they were at $FA_VAR_BASE, default the last landed main 3c9fc3f), for A/B timings of a whole
# change. Needs the repository's .git (git show).
import os, subprocess
BASE = os.environ.get("FA_VAR_BASE", "3c9fc3f")
FILES = ["backends/cuda/attention/sm90/sm90_attention.cu", "backends/cuda/attention/sm90/sm90_tile.cuh",
         "backends/cuda/attention/attention.cu", "backends/cuda/fa_cuda_internal.cuh"]
def _base(path):
    return subprocess.run(["git", "show", "%s:%s" % (BASE, path)], check=True, capture_output=True,
                          text=True).stdout
VARIANTS = {"base": [(f, open(f).read(), _base(f)) for f in FILES]}
# and the softmax / persistence variants beside it (pick with FA_VAR_ONLY)
import runpy
VARIANTS.update(runpy.run_path(os.path.join(os.path.dirname(__file__), "sm90_softmax.py"))["VARIANTS"])
