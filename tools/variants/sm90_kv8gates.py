# tools/gpu_variants.sh spec: both gates of the wgmma family's KV8 kernels (built, not yet run on
# a GPU; off in the tree) at once, for one call that times and tests them:
#   FA_PF_SPEC=tools/variants/sm90_kv8gates.py FA_VAR_ONLY=both
#   FA_PF_APPLY="tools/variants/sm90_kv8gates.py both" bash tools/gpu_prefill.sh variants tests
# (h256: sm90_kv8h256.py's "on", gather: sm90_kv8gather.py's "on", both: the two; all: both and
# sm90_q8gather.py's "on", the fp8 query at the same block sizes)
import os
import runpy

_here = os.path.dirname(os.path.abspath(__file__))
H256 = runpy.run_path(os.path.join(_here, "sm90_kv8h256.py"))["VARIANTS"]["on"]
GATHER = runpy.run_path(os.path.join(_here, "sm90_kv8gather.py"))["VARIANTS"]["on"]
Q8 = runpy.run_path(os.path.join(_here, "sm90_q8gather.py"))["VARIANTS"]["on"]
VARIANTS = {"h256": H256, "gather": GATHER, "both": H256 + GATHER, "all": H256 + GATHER + Q8}
