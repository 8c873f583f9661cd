# tools/gpu_variants.sh spec: the tree's memory-bound ops (reshape_and_cache, merge_states,
# dcp_correct: backends/cuda/cache_kernels.cu and merge_kernels.cu) against the same files as
# they were at $FA_VAR_BASE (default 4bf1d6b, the commit before this dcp_correct), on bench_gpu's
# cache / merge / dcp rows. Needs the repository's .git (git show). Beside "base" (pick with
# FA_VAR_ONLY): "dcp8", dcp_correct at 8 chunks a lane (the tree: 4; teams of half the lanes).
#   FA_PF_SPEC=tools/variants/ops_base.py FA_PF_ARGS="--only cache,merge,dcp" \
#       bash tools/gpu_prefill.sh variants
# (no --no-ceilings: the rows' fractions are of the copy ceiling measured in the same run)
import os, subprocess
BASE = os.environ.get("FA_VAR_BASE", "4bf1d6b")
FILES = ["backends/cuda/cache_kernels.cu", "backends/cuda/merge_kernels.cu"]
def _base(path):
    return subprocess.run(["git", "show", "%s:%s" % (BASE, path)], check=True, capture_output=True,
                          text=True).stdout
M = FILES[1]
VARIANTS = {
    "base": [(f, open(f).read(), _base(f)) for f in FILES],
    "dcp8": [(M, "constexpr int kDcpPer = 4;", "constexpr int kDcpPer = 8;")],
}
