# tools/gpu_variants.sh spec: the split combine fused into the multi-warp decode tile (the tree)
# against the separate combine launch ("nofuse": the call's split_counters not handed to the
# tile, so the combine kernel merges every split sequence as before), on bench_gpu's decode rows;
# and "opsbase": the memory-bound ops' kernels as they were at $FA_VAR_BASE (default 4bf1d6b).
import os, runpy
A = "backends/cuda/attention/attention.cu"
VARIANTS = {
    "nofuse": [(A, "    pl->p.split_counters = pl->mw && S > 1 ? a->split_counters : nullptr;\n",
                "    pl->p.split_counters = nullptr;\n")],
}
os.environ.setdefault("FA_VAR_BASE", "4bf1d6b")
VARIANTS["opsbase"] = runpy.run_path(os.path.join(os.path.dirname(__file__), "ops_base.py"))["VARIANTS"]["base"]
