"""The backend ops through the binding on the CPU backend: the cache write (bit-exact), the
attention op (paged and dense) against the reference, merge_states and dcp_correct against
NumPy; and the tensor interop (array interface, DLPack, dtype views)."""
import numpy as np
import pytest

import flashattn as fa
from reference import PagedStep, attention_ref, bf16_bits_to_f32, f32_to_bf16_bits


@pytest.mark.parametrize("np_dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_reshape_and_cache_exact(cpu, rng, np_dtype):
    t, hkv, d, nb, bs = 7, 2, 64, 4, 16
    k = rng.standard_normal((t, hkv, d)).astype(np_dtype)
    v = rng.standard_normal((t, hkv, d)).astype(np_dtype)
    cache = np.full((2, nb, bs, hkv, d), -3, np_dtype)
    slots = np.array([5, 17, -1, 63, 0, 33, 18], np.int64)
    before = cache.copy()
    fa.reshape_and_cache(cpu, k, v, cache, slots)
    want = before.copy()
    for i, s in enumerate(slots):
        if s >= 0:
            want[0, s // bs, s % bs] = k[i]
            want[1, s // bs, s % bs] = v[i]
    assert np.array_equal(cache.view(np.uint8), want.view(np.uint8))


def test_reshape_and_cache_bf16_bits(cpu, rng):
    k = f32_to_bf16_bits(rng.standard_normal((3, 1, 16)))
    v = f32_to_bf16_bits(rng.standard_normal((3, 1, 16)))
    cache = np.zeros((2, 1, 16, 1, 16), np.uint16)
    bf = lambda x, n: fa.as_tensor(x, n, dtype=fa.DType.BF16)
    fa.reshape_and_cache(cpu, bf(k, "key"), bf(v, "value"), bf(cache, "kv_cache"), [2, 0, 9])
    assert np.array_equal(cache[0, 0, [2, 0, 9]], k) and np.array_equal(cache[1, 0, [2, 0, 9]], v)


def test_reshape_and_cache_fp8_scale(cpu, rng):
    k = (rng.standard_normal((4, 2, 32)) * 100).astype(np.float32)
    v = rng.standard_normal((4, 2, 32)).astype(np.float32)
    cache = np.zeros((2, 2, 16, 2, 32), np.uint8)
    fa.reshape_and_cache(cpu, k, v, fa.as_tensor(cache, "kv_cache", dtype=fa.DType.FP8_E5M2),
                         np.array([1, 2, 30, 31], np.int64), k_scale=0.5, v_scale=2.0)
    for i, s in enumerate([1, 2, 30, 31]):
        blk, row = divmod(s, 16)
        assert cache[0, blk, row].ravel().tolist() == [
            fa.float_to_fp8(x / 0.5, fa.DType.FP8_E5M2) for x in k[i].ravel()]
        assert cache[1, blk, row].ravel().tolist() == [
            fa.float_to_fp8(x / 2.0, fa.DType.FP8_E5M2) for x in v[i].ravel()]


def test_attention_op_paged(cpu, rng):
    step = PagedStep(rng, [(20, 5), (0, 9), (40, 1)], 8, 2, 64)
    fa.reshape_and_cache(cpu, step.k, step.v, step.cache, step.slot_mapping)
    out = np.zeros_like(step.q)
    lse = np.zeros((8, step.T), np.float32)
    fa.attention(cpu, step.q, step.cache[0], step.cache[1], out, step.query_start_loc,
                 max_seqlen_q=9, max_seqlen_k=int(step.seq_lens.max()), seqused_k=step.seq_lens,
                 block_table=step.block_table, causal=True, lse=lse)
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)
    ref_lse = np.concatenate([attention_ref(step.q_list[b], step.k_full[b], step.v_full[b])[1]
                              for b in range(3)], axis=1)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)


def test_attention_op_dense_window(cpu, rng):
    q = rng.standard_normal((12, 4, 32)).astype(np.float32)
    k = rng.standard_normal((12, 2, 32)).astype(np.float32)
    v = rng.standard_normal((12, 2, 32)).astype(np.float32)
    out = np.zeros_like(q)
    fa.attention(cpu, q, k, v, out, [0, 5, 12], max_seqlen_q=7, max_seqlen_k=7,
                 cu_seqlens_k=[0, 5, 12], window=(2, 1), softmax_scale=0.3)
    r = [attention_ref(q[a:b], k[a:b], v[a:b], causal=False, window=(2, 1), scale=0.3)[0]
         for a, b in ((0, 5), (5, 12))]
    np.testing.assert_allclose(out, np.concatenate(r), rtol=2e-5, atol=2e-5)


def _lse_merge(p, lp, s, ls):
    m = np.maximum(lp, ls)
    wp, ws = np.exp(lp - m), np.exp(ls - m)
    tot = wp + ws
    out = p * (wp / tot).T[:, :, None] + s * (ws / tot).T[:, :, None]
    return out, m + np.log(tot)


def test_merge_states(cpu, rng):
    t, h, d = 6, 4, 32
    p = rng.standard_normal((t, h, d)).astype(np.float32)
    s = rng.standard_normal((t, h, d)).astype(np.float32)
    lp = rng.standard_normal((h, t)).astype(np.float32)
    ls = rng.standard_normal((h, t)).astype(np.float32)
    out = np.zeros_like(p)
    out_lse = np.zeros((h, t), np.float32)
    fa.merge_states(cpu, out, p, lp, s, ls, out_lse=out_lse)
    want, want_lse = _lse_merge(p.astype(np.float64), lp.astype(np.float64),
                                s.astype(np.float64), ls.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_lse, want_lse, rtol=1e-5, atol=1e-5)


def test_merge_states_empty_side(cpu, rng):
    p = rng.standard_normal((2, 1, 8)).astype(np.float32)
    s = np.full((2, 1, 8), np.nan, np.float32)  # an empty side is skipped, never multiplied
    lp = np.zeros((1, 2), np.float32)
    ls = np.full((1, 2), -np.inf, np.float32)
    out = np.zeros_like(p)
    fa.merge_states(cpu, out, p, lp, s, ls)
    np.testing.assert_allclose(out, p, rtol=1e-6)


def test_dcp_correct(cpu, rng):
    n, t, h, d = 3, 4, 2, 16
    out = rng.standard_normal((t, h, d)).astype(np.float32)
    lse_all = rng.standard_normal((n, h, t)).astype(np.float32)
    lse_out = np.zeros((h, t), np.float32)
    want = out.astype(np.float64).copy()
    glob = np.log(np.exp(lse_all.astype(np.float64)).sum(axis=0))
    want *= np.exp(lse_all[1] - glob).T[:, :, None]
    fa.dcp_correct(cpu, out, lse_all, 1, lse_out=lse_out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse_out, glob, rtol=1e-5, atol=1e-5)


# --- interop ----------------------------------------------------------------------------------

def test_as_tensor_numpy_strides():
    a = np.zeros((4, 6, 8), np.float32)[:, ::2]
    t = fa.as_tensor(a, "x")
    assert t.shape == (4, 3, 8) and t.strides == (48, 16, 1) and t.dtype == fa.DType.F32
    assert t.data_ptr == a.__array_interface__["data"][0] and t.device == "cpu"


def test_as_tensor_dtypes():
    assert fa.as_tensor(np.zeros(2, np.float16)).dtype == fa.DType.F16
    assert fa.as_tensor(np.zeros(2, np.int32)).dtype == fa.DType.I32
    assert fa.as_tensor(np.zeros(2, np.int64)).dtype == fa.DType.I64
    u8 = fa.as_tensor(np.zeros(2, np.uint8))
    assert u8.raw_u8 and u8.dtype == fa.DType.FP8_E4M3
    assert fa.as_tensor(np.zeros(2, np.uint8), dtype=fa.DType.FP8_E5M2).dtype == fa.DType.FP8_E5M2
    assert fa.as_tensor(np.zeros(2, np.uint16), dtype=fa.DType.BF16).dtype == fa.DType.BF16
    with pytest.raises(fa.Error, match="cannot view"):
        fa.as_tensor(np.zeros(2, np.float32), "x", dtype=fa.DType.BF16)


def test_as_tensor_dlpack_from_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, 1:]

    class OnlyDLPack:  # hides the array interface: the DLPack route alone
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, stream=None):
            return self.x.__dlpack__()

        def __dlpack_device__(self):
            return self.x.__dlpack_device__()

    t = fa.as_tensor(OnlyDLPack(a), "x")
    assert t.shape == (2, 2, 4) and t.strides == (12, 4, 1) and t.device == "cpu"
    assert t.data_ptr == a.__array_interface__["data"][0] and t.dtype == fa.DType.F32


def test_forward_through_dlpack(cpu, rng):
    step = PagedStep(rng, [(3, 4)], 4, 2, 32)

    class D:
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, stream=None):
            return self.x.__dlpack__()

    b = fa.Builder(cpu, num_heads_q=4, num_heads_kv=2, head_size=32, dtype=fa.DType.F32)
    md = b.build(query_start_loc=step.query_start_loc, seq_lens=step.seq_lens,
                 block_table=D(step.block_table), slot_mapping=D(step.slot_mapping))
    out = np.zeros_like(step.q)
    layer = fa.Layer(num_heads_q=4, num_heads_kv=2, head_size=32, dtype=fa.DType.F32)
    fa.forward(layer, cpu, D(step.q), D(step.k), D(step.v), D(step.cache), md, D(out))
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_cuda_interface_on_cpu_backend_rejected(cpu):
    class FakeCuda:
        __cuda_array_interface__ = {"shape": (2, 4, 32), "typestr": "<f4", "data": (4096, False),
                                    "version": 3, "strides": None}

    layer = fa.Layer(num_heads_q=4, head_size=32, dtype=fa.DType.F32)
    with pytest.raises(fa.Error) as e:
        fa.forward_profile(layer, cpu, FakeCuda())
    assert "out" in e.value.message and "cuda:0" in e.value.message and "host" in e.value.message


def test_conversions_round_trip():
    for x in (0.0, 1.0, -2.5, 448.0, 1e-3):
        assert fa.fp8_to_float(fa.float_to_fp8(x)) == pytest.approx(x, rel=0.07, abs=2e-3)
    assert fa.bf16_to_float(fa.float_to_bf16(3.0)) == 3.0
    assert fa.half_to_float(fa.float_to_half(0.5)) == 0.5
    assert fa.fp8_to_float(fa.float_to_fp8(1e6)) == 448.0  # saturates
    bits = f32_to_bf16_bits(np.array([1.1, -7.25, 3e-5], np.float32))
    assert [fa.float_to_bf16(x) for x in (1.1, -7.25, 3e-5)] == bits.tolist()
    assert bf16_bits_to_f32(bits).tolist() == [fa.bf16_to_float(b) for b in bits]


def test_check_op_and_synchronize(cpu):
    a = fa.structs.fa_merge_args()
    a.num_tokens, a.num_heads, a.head_size, a.dtype = 1, 1, 12, fa.DType.F32
    with pytest.raises(fa.Error) as e:
        cpu.check_op(fa.Op.MERGE_STATES, a)
    assert "head_size" in e.value.message and "12" in e.value.message
    cpu.synchronize()
    assert cpu.api_version == fa.BACKEND_API_VERSION


def test_attention_op_split_kv(cpu, rng):
    step = PagedStep(rng, [(900, 1), (300, 2), (40, 1)], 8, 2, 64)
    fa.reshape_and_cache(cpu, step.k, step.v, step.cache, step.slot_mapping)
    plan = fa.plan_splits(cpu, step.query_start_loc, step.seq_lens, 8, 2, 64)
    s = plan[0]
    assert s > 1 and max(plan[1:]) > 1, plan
    out = np.zeros_like(step.q)
    lse = np.zeros((8, step.T), np.float32)
    split_out = np.zeros((s, step.T, 8, 64), np.float32)
    split_lse = np.zeros((s, 8, step.T), np.float32)
    fa.attention(cpu, step.q, step.cache[0], step.cache[1], out, step.query_start_loc,
                 max_seqlen_q=2, max_seqlen_k=int(step.seq_lens.max()), seqused_k=step.seq_lens,
                 block_table=step.block_table, causal=True, lse=lse, num_splits=s,
                 split_plan=np.array(plan, np.int32), split_out=split_out, split_lse=split_lse)
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)
    assert np.abs(split_out).sum() > 0  # the partials were really written
    with pytest.raises(fa.Error, match="split_lse"):
        fa.attention(cpu, step.q, step.cache[0], step.cache[1], out, step.query_start_loc,
                     max_seqlen_q=2, max_seqlen_k=901, seqused_k=step.seq_lens,
                     block_table=step.block_table, num_splits=s, split_out=split_out,
                     split_lse=split_lse[:, :4])


def test_attention_op_fp8_query(cpu, rng):
    # q and the cache in E4M3 (uint8 storage), q_descale per (sequence, KV head), out in f32
    step = PagedStep(rng, [(20, 3), (7, 2)], 4, 2, 32)
    fmt = fa.DType.FP8_E4M3
    enc = np.vectorize(lambda x: fa.float_to_fp8(x, fmt), otypes=[np.uint8])
    table = np.array([fa.fp8_to_float(i, fmt) for i in range(256)], np.float64)
    cache8 = enc(step.cache)
    q8 = enc(step.q * 4.0)
    descale = np.array([[0.25, 0.5], [0.125, 0.25]], np.float32)
    out = np.zeros(step.q.shape, np.float32)
    fa.attention(cpu, q8, cache8[0], cache8[1], out, step.query_start_loc, max_seqlen_q=3,
                 max_seqlen_k=23, seqused_k=step.seq_lens, block_table=step.block_table,
                 causal=True, q_descale=descale)
    deq = table[cache8]
    for b in range(2):
        a, e = step.query_start_loc[b], step.query_start_loc[b + 1]
        qd = table[q8[a:e]] * np.repeat(descale[b], 2)[None, :, None]
        rows = [step.block_table[b, p // 16] for p in range(int(step.seq_lens[b]))]
        k = np.stack([deq[0, blk, p % 16] for p, blk in enumerate(rows)])
        v = np.stack([deq[1, blk, p % 16] for p, blk in enumerate(rows)])
        ref, _ = attention_ref(qd, k, v)
        np.testing.assert_allclose(out[a:e], ref, rtol=2e-5, atol=2e-5)
