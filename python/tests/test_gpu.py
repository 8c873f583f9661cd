"""The binding on the CUDA backend with PyTorch tensors, against
torch.nn.functional.scaled_dot_product_attention in float32 (bf16 / f16 activations, paged
caches, causal prefill, decode, GQA, fp8 caches), plus the interop routes (__cuda_array_interface__,
DLPack, CuPy, torch CPU tensors and ml_dtypes on the CPU backend). Skips without torch, a GPU or
libflashattn_cuda.so. Run by tests/run_gpu.sh on a GPU machine."""
import math

import numpy as np
import pytest

import flashattn as fa

torch = pytest.importorskip("torch")
F = torch.nn.functional

need_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and fa.have_cuda()),
                              reason="needs a CUDA GPU, torch with CUDA and libflashattn_cuda.so")
TORCH_DT = {fa.DType.BF16: torch.bfloat16, fa.DType.F16: torch.float16, fa.DType.F32: torch.float32}


@pytest.fixture(scope="module")
def gpu():
    if not (torch.cuda.is_available() and fa.have_cuda()):
        pytest.skip("needs a CUDA GPU, torch with CUDA and libflashattn_cuda.so")
    be = fa.Backend.cuda(0, torch.cuda.current_stream())
    yield be
    be.close()


def sdpa_ref(q, k, v, causal=True, window_left=-1, scale=None):
    """One sequence: q [Lq, Hq, D], k / v [Lk, Hkv, D] (any float dtype) -> [Lq, Hq, D] float32,
    through SDPA with a bottom-right mask and the KV heads repeated for GQA."""
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    g = hq // hkv
    qf = q.float().permute(1, 0, 2)[None]
    kf = k.float().repeat_interleave(g, dim=1).permute(1, 0, 2)[None]
    vf = v.float().repeat_interleave(g, dim=1).permute(1, 0, 2)[None]
    i = torch.arange(lq, device=q.device)[:, None]
    j = torch.arange(lk, device=q.device)[None, :]
    mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
    if causal:
        mask &= j <= i + lk - lq
    if window_left >= 0:
        mask &= j >= i + lk - lq - window_left
    o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask,
                                       scale=scale if scale is not None else 1 / math.sqrt(d))
    return o[0].permute(1, 0, 2)


class Step:
    """A paged step on the GPU: per request (context, query) lengths, random keys / values for
    every position, a shuffled block table, the contexts written straight into the cache."""

    def __init__(self, lens, hq, hkv, d, bs=16, dtype=torch.bfloat16, seed=0, cache_dtype=None):
        g = torch.Generator(device="cuda").manual_seed(seed)
        dev = "cuda"
        self.lens, self.hq, self.hkv, self.d, self.bs = lens, hq, hkv, d, bs
        seq = [c + n for c, n in lens]
        nblk = [-(-s // bs) for s in seq]
        self.num_blocks = sum(nblk) + 2
        perm = torch.randperm(self.num_blocks, generator=g, device=dev).to(torch.int32)
        self.block_table = torch.zeros(len(lens), max(nblk), dtype=torch.int32, device=dev)
        pos = 0
        for b, n in enumerate(nblk):
            self.block_table[b, :n] = perm[pos:pos + n]
            pos += n
        rn = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=torch.float32).to(dtype)
        self.k_full = [rn(s, hkv, d) for s in seq]
        self.v_full = [rn(s, hkv, d) for s in seq]
        self.q_list = [rn(n, hq, d) for _, n in lens]
        self.q = torch.cat(self.q_list)
        self.k = torch.cat([kf[c:] for kf, (c, _) in zip(self.k_full, lens)])
        self.v = torch.cat([vf[c:] for vf, (c, _) in zip(self.v_full, lens)])
        self.qsl = [0]
        for _, n in lens:
            self.qsl.append(self.qsl[-1] + n)
        self.seq_lens = seq
        bt = self.block_table.cpu()
        slots = [int(bt[b, p // bs]) * bs + p % bs for b, (c, n) in enumerate(lens)
                 for p in range(c, c + n)]
        self.slot_mapping = torch.tensor(slots, dtype=torch.int64, device=dev)
        self.cache = rn(2, self.num_blocks, bs, hkv, d)
        self.write_contexts()

    def write_contexts(self):
        """Puts every request's context keys and values into its cache blocks."""
        bt = self.block_table.cpu()
        for b, (c, _) in enumerate(self.lens):
            if c == 0:
                continue
            p = torch.arange(c)
            blk = bt[b, p // self.bs].long().cuda()
            row = (p % self.bs).cuda()
            self.cache[0, blk, row] = self.k_full[b][:c]
            self.cache[1, blk, row] = self.v_full[b][:c]

    def remap_slots(self):
        bt = self.block_table.cpu()
        slots = [int(bt[b, p // self.bs]) * self.bs + p % self.bs
                 for b, (c, n) in enumerate(self.lens) for p in range(c, c + n)]
        self.slot_mapping = torch.tensor(slots, dtype=torch.int64, device="cuda")

    def builder(self, be, dtype, **cfg):
        return fa.Builder(be, num_heads_q=self.hq, num_heads_kv=self.hkv, head_size=self.d,
                          dtype=dtype, block_size=self.bs, max_num_seqs=max(len(self.lens), 8),
                          max_num_batched_tokens=max(self.qsl[-1], 64), **cfg)

    def build(self, b, **kw):
        return b.build(query_start_loc=self.qsl, seq_lens=self.seq_lens,
                       block_table=self.block_table, slot_mapping=self.slot_mapping, **kw)

    def reference(self, **kw):
        return torch.cat([sdpa_ref(self.q_list[b], self.k_full[b], self.v_full[b], **kw)
                          for b in range(len(self.lens))])


def run(be, step, dtype=fa.DType.BF16, layer_kw=None, cfg=None, cache=None, prefix=0):
    layer = fa.Layer(num_heads_q=step.hq, num_heads_kv=step.hkv, head_size=step.d, dtype=dtype,
                     **(layer_kw or {}))
    b = step.builder(be, dtype, **(cfg or {}))
    b.set_layers([layer])
    md = step.build(b, common_prefix_len=prefix)
    out = torch.full_like(step.q, 3.0)
    fa.forward(layer, be, step.q, step.k, step.v, step.cache if cache is None else cache, md, out)
    torch.cuda.synchronize()
    return out, md


def close(out, ref, tol):
    err = (out.float() - ref).abs().max().item()
    assert err <= tol * max(1.0, ref.abs().max().item()), "max abs error %g" % err


@need_gpu
@pytest.mark.parametrize("hq,hkv,d", [(8, 8, 128), (16, 2, 128), (8, 1, 64)],
                         ids=["mha-d128", "gqa8-d128", "mqa-d64"])
def test_bf16_causal_prefill(gpu, hq, hkv, d):
    step = Step([(0, 77), (0, 16), (0, 130)], hq, hkv, d)
    out, _ = run(gpu, step)
    close(out, step.reference(), 2e-2)


@need_gpu
def test_bf16_prefill_with_context(gpu):
    step = Step([(100, 33), (5, 64), (256, 1)], 16, 4, 128, seed=1)
    out, _ = run(gpu, step)
    close(out, step.reference(), 2e-2)


@need_gpu
@pytest.mark.parametrize("bs", [16, 64])
def test_bf16_decode_paged(gpu, bs):
    step = Step([(511, 1), (3, 1), (1000, 1), (64, 1), (77, 1), (2047, 1)], 32, 8, 128, bs=bs,
                seed=2)
    out, md = run(gpu, step)
    assert md.max_query_len == 1
    close(out, step.reference(), 2e-2)


@need_gpu
def test_bf16_decode_split_kv(gpu):
    step = Step([(8000, 1)], 8, 1, 128, seed=3)
    out, md = run(gpu, step)
    assert md.num_splits > 1, md.describe()
    close(out, step.reference(), 2e-2)


@need_gpu
def test_f16_mixed_window(gpu):
    step = Step([(40, 1), (0, 50), (90, 7)], 8, 2, 64, dtype=torch.float16, seed=4)
    out, _ = run(gpu, step, dtype=fa.DType.F16, layer_kw={"sliding_window": 33})
    close(out, step.reference(window_left=32), 5e-3)


@need_gpu
def test_bf16_cascade(gpu):
    n = 16
    lens = [(64 + 5 * r, 1) for r in range(n)]
    step = Step(lens, 16, 4, 128, seed=5)
    # share the first 4 blocks (64 tokens) between all requests
    shared = step.block_table[0, :4].clone()
    for b in range(1, n):
        step.block_table[b, :4] = shared
        step.k_full[b][:64] = step.k_full[0][:64]
        step.v_full[b][:64] = step.v_full[0][:64]
    step.remap_slots()
    step.write_contexts()
    out, md = run(gpu, step, prefix=64)
    assert md.use_cascade == 1
    close(out, step.reference(), 2e-2)


@need_gpu
@pytest.mark.parametrize("cache_dtype,tdt", [(fa.CacheDType.FP8_E4M3, "float8_e4m3fn"),
                                             (fa.CacheDType.FP8_E5M2, "float8_e5m2")],
                         ids=["e4m3", "e5m2"])
def test_fp8_cache(gpu, cache_dtype, tdt):
    step = Step([(0, 20), (0, 3)], 8, 2, 128, seed=6)
    cache = torch.zeros(2, step.num_blocks, 16, 2, 128, dtype=torch.uint8, device="cuda")
    out, _ = run(gpu, step, layer_kw={"kv_cache_dtype": cache_dtype, "k_scale": 0.5,
                                      "v_scale": 0.25},
                 cfg={"cache_dtype": cache_dtype}, cache=cache)
    f8 = getattr(torch, tdt)
    deq = cache.view(f8).float()
    # the cache holds torch's own fp8 rounding of k / scale (saturating)
    mx = torch.finfo(f8).max
    want_k = (step.k.float() / 0.5).clamp(-mx, mx).to(f8).view(torch.uint8)
    sl = step.slot_mapping.cpu().tolist()
    got_k = torch.stack([cache[0, s // 16, s % 16] for s in sl])
    assert torch.equal(got_k, want_k)
    for b, (c, n) in enumerate(step.lens):
        rows = sl[step.qsl[b]:step.qsl[b + 1]]
        step.k_full[b] = torch.stack([deq[0, s // 16, s % 16] for s in rows]) * 0.5
        step.v_full[b] = torch.stack([deq[1, s // 16, s % 16] for s in rows]) * 0.25
    close(out, step.reference(), 2e-2)


@need_gpu
def test_cache_write_exact(gpu):
    step = Step([(10, 9), (0, 4)], 4, 2, 64, seed=7)
    before = step.cache.clone()
    fa.reshape_and_cache(gpu, step.k, step.v, step.cache, step.slot_mapping)
    torch.cuda.synchronize()
    want = before.clone()
    for t, s in enumerate(step.slot_mapping.cpu().tolist()):
        want[0, s // 16, s % 16] = step.k[t]
        want[1, s // 16, s % 16] = step.v[t]
    assert torch.equal(step.cache.view(torch.int16), want.view(torch.int16))


@need_gpu
def test_profile_and_non_default_stream(gpu):
    s = torch.cuda.Stream()
    be = fa.Backend.cuda(0, s)
    layer = fa.Layer(num_heads_q=8, num_heads_kv=2, head_size=128)
    out = torch.randn(5, 8, 128, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        fa.forward_profile(layer, be, out)
    s.synchronize()
    assert not out.any()
    be.close()


@need_gpu
def test_host_array_rejected(gpu):
    layer = fa.Layer(num_heads_q=8, head_size=128)
    with pytest.raises(fa.Error) as e:
        fa.forward_profile(layer, gpu, np.zeros((2, 8, 128), np.float16))
    assert "out" in e.value.message and "cuda" in e.value.message
    b = fa.Builder(gpu, num_heads_q=8, head_size=128)
    with pytest.raises(fa.Error) as e:
        b.build(query_start_loc=[0, 1], seq_lens=[1], block_table=[[0]], slot_mapping=[0])
    assert "block_table" in e.value.message


@need_gpu
def test_backend_info(gpu):
    i = gpu.info
    assert gpu.name == "cuda" and i["cc_major"] >= 8 and i["num_sms"] > 0
    assert gpu.caps.num_dims >= 1


@need_gpu
def test_interop_routes(gpu):
    x = torch.zeros(4, 8, 64, device="cuda", dtype=torch.float16)[:, ::2]
    t = fa.as_tensor(x, "x")  # __cuda_array_interface__
    assert t.dtype == fa.DType.F16 and t.strides == (512, 128, 1) and t.device == "cuda:0"
    assert t.data_ptr == x.data_ptr()
    y = torch.zeros(3, 2, 16, device="cuda", dtype=torch.bfloat16)
    t = fa.as_tensor(y, "y")  # bf16 has no typestr: DLPack
    assert t.dtype == fa.DType.BF16 and t.data_ptr == y.data_ptr() and t.shape == (3, 2, 16)
    cupy = pytest.importorskip("cupy")
    c = cupy.zeros((5, 4, 32), dtype=cupy.float32)
    t = fa.as_tensor(c, "c")
    assert t.dtype == fa.DType.F32 and t.device == "cuda:0" and t.data_ptr == c.data.ptr


@need_gpu
def test_cupy_forward(gpu):
    cupy = pytest.importorskip("cupy")
    step = Step([(20, 5)], 8, 2, 128, dtype=torch.float16, seed=8)
    layer = fa.Layer(num_heads_q=8, num_heads_kv=2, head_size=128, dtype=fa.DType.F16)
    b = step.builder(gpu, fa.DType.F16)
    md = b.build(query_start_loc=step.qsl, seq_lens=step.seq_lens,
                 block_table=cupy.asarray(step.block_table), slot_mapping=cupy.asarray(step.slot_mapping))
    out = cupy.zeros((5, 8, 128), dtype=cupy.float16)
    torch.cuda.synchronize()
    fa.forward(layer, gpu, cupy.asarray(step.q), cupy.asarray(step.k), cupy.asarray(step.v),
               cupy.asarray(step.cache), md, out)
    cupy.cuda.runtime.deviceSynchronize()
    close(torch.as_tensor(out, device="cuda"), step.reference(), 5e-3)


# --- torch CPU tensors and ml_dtypes on the CPU backend (no GPU needed) -----------------------

def test_torch_cpu_bf16_forward():
    be = fa.Backend.cpu()
    torch.manual_seed(0)
    t, hq, hkv, d = 9, 4, 2, 64
    q = torch.randn(t, hq, d).to(torch.bfloat16)
    k = torch.randn(t, hkv, d).to(torch.bfloat16)
    v = torch.randn(t, hkv, d).to(torch.bfloat16)
    cache = torch.zeros(2, 2, 16, hkv, d, dtype=torch.bfloat16)
    b = fa.Builder(be, num_heads_q=hq, num_heads_kv=hkv, head_size=d)
    layer = fa.Layer(num_heads_q=hq, num_heads_kv=hkv, head_size=d)
    md = b.build(query_start_loc=torch.tensor([0, t], dtype=torch.int32), seq_lens=[t],
                 block_table=torch.tensor([[1]], dtype=torch.int32),
                 slot_mapping=torch.arange(16, 16 + t))
    out = torch.zeros(t, hq, d, dtype=torch.bfloat16)
    fa.forward(layer, be, q, k, v, cache, md, out)
    assert torch.equal(cache[0, 1, :t], k)
    close(out, sdpa_ref(q, k, v), 2e-2)
    be.close()


def test_ml_dtypes_bf16_numpy():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.zeros((3, 2, 8), dtype=ml_dtypes.bfloat16)
    t = fa.as_tensor(a, "a")
    assert t.dtype == fa.DType.BF16 and t.strides == (16, 8, 1)
    f = np.zeros(4, dtype=ml_dtypes.float8_e5m2)
    assert fa.as_tensor(f, "f").dtype == fa.DType.FP8_E5M2
