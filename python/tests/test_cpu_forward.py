"""fa_forward on the CPU backend through the binding, against the float64 NumPy reference:
causal prefill, decode, GQA, mixed batches, windows, softcap, sinks, cascade, f16 / bf16 / fp8."""
import numpy as np
import pytest

import flashattn as fa
from reference import PagedStep, attention_ref, bf16_bits_to_f32, f32_to_bf16_bits


def run_step(be, step, layer, dtype=fa.DType.F32, prefix=0, cache=None, q=None, k=None, v=None,
             max_num_splits=0, **cfg):
    b = fa.Builder(be, num_heads_q=step.hq, num_heads_kv=step.hkv, head_size=step.d,
                   dtype=dtype, block_size=step.bs, max_num_seqs=max(len(step.lens), 4),
                   max_num_batched_tokens=max(step.T, 16), max_num_splits=max_num_splits, **cfg)
    b.set_layers([layer])
    md = b.build(query_start_loc=step.query_start_loc, seq_lens=step.seq_lens,
                 block_table=step.block_table, slot_mapping=step.slot_mapping,
                 common_prefix_len=prefix)
    cache = step.cache if cache is None else cache
    q = step.q if q is None else q
    k = step.k if k is None else k
    v = step.v if v is None else v
    out_dtype = np.float32 if dtype == fa.DType.F32 else (np.float16 if dtype == fa.DType.F16
                                                          else np.uint16)
    out = np.full((step.T, step.hq, step.d), 7, out_dtype)
    out_t = fa.as_tensor(out, "out", dtype=dtype) if dtype == fa.DType.BF16 else out
    fa.forward(layer, be, q, k, v, cache, md, out_t)
    return out, md


def f32_layer(step, **kw):
    return fa.Layer(num_heads_q=step.hq, num_heads_kv=step.hkv, head_size=step.d,
                    dtype=fa.DType.F32, **kw)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (6, 1)], ids=["mha", "gqa4", "mqa"])
def test_causal_prefill(cpu, rng, hq, hkv):
    step = PagedStep(rng, [(0, 37), (0, 5), (0, 16)], hq, hkv, 64)
    out, md = run_step(cpu, step, f32_layer(step))
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)
    assert md.num_reqs == 3 and md.num_actual_tokens == 58 and md.max_query_len == 37


def test_prefill_with_context(cpu, rng):
    step = PagedStep(rng, [(40, 9), (3, 30)], 8, 2, 128)
    out, _ = run_step(cpu, step, f32_layer(step))
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_decode_gqa(cpu, rng):
    step = PagedStep(rng, [(300, 1), (17, 1), (1, 1), (129, 1), (64, 1)], 8, 2, 64)
    out, md = run_step(cpu, step, f32_layer(step))
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)
    assert md.max_query_len == 1 and md.max_seq_len == 301


def test_decode_split_kv(cpu, rng):
    # one long decode: the planner splits the keys; the result is the same attention
    step = PagedStep(rng, [(4000, 1)], 4, 1, 64, block_size=16)
    out, md = run_step(cpu, step, f32_layer(step))
    assert md.num_splits > 1, md.describe()
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_mixed_batch(cpu, rng):
    step = PagedStep(rng, [(50, 1), (0, 23), (70, 4), (8, 1)], 8, 4, 96, block_size=32)
    out, _ = run_step(cpu, step, f32_layer(step))
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_sliding_window_softcap_sinks(cpu, rng):
    step = PagedStep(rng, [(60, 12), (5, 20)], 4, 2, 64)
    sinks = rng.standard_normal(4).astype(np.float32)
    layer = f32_layer(step, sliding_window=17, logits_soft_cap=5.0, sinks=sinks)
    assert layer.window == (16, 0)
    out, _ = run_step(cpu, step, layer)
    ref = step.reference(window=(16, 0), softcap=5.0, sinks=sinks.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


def test_alibi(cpu, rng):
    step = PagedStep(rng, [(20, 6), (0, 9)], 4, 4, 32)
    slopes = [0.5, 0.25, 0.125, 0.0625]
    out, _ = run_step(cpu, step, f32_layer(step, alibi_slopes=slopes))
    ref = step.reference(alibi=np.array(slopes))
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


def test_non_causal_batch(cpu, rng):
    step = PagedStep(rng, [(10, 6)], 4, 2, 64)
    b = fa.Builder(cpu, num_heads_q=4, num_heads_kv=2, head_size=64, dtype=fa.DType.F32)
    md = b.build(query_start_loc=step.query_start_loc, seq_lens=step.seq_lens,
                 block_table=step.block_table, slot_mapping=step.slot_mapping,
                 causal=fa.Causal.OFF)
    out = np.zeros_like(step.q)
    fa.forward(f32_layer(step), cpu, step.q, step.k, step.v, step.cache, md, out)
    np.testing.assert_allclose(out, step.reference(causal=False), rtol=2e-5, atol=2e-5)


def test_cascade(cpu, rng):
    # four requests share their first 2 blocks (32 tokens)
    step = PagedStep(rng, [(40, 1), (33, 1), (50, 3), (32, 1)], 8, 2, 64)
    shared = step.block_table[0, :2].copy()
    # make the shared prefix really shared: same blocks, same keys and values
    for b in range(1, 4):
        old = step.block_table[b, :2].copy()
        step.block_table[b, :2] = shared
        for p in range(32):
            step.k_full[b][p] = step.k_full[0][p]
            step.v_full[b][p] = step.v_full[0][p]
        used = -(-int(step.seq_lens[b]) // 16)
        assert not set(old) & set(step.block_table[b, 2:used])
    slots = []
    for b, (c, n) in enumerate(step.lens):
        for p in range(c, c + n):
            slots.append(int(step.block_table[b, p // 16]) * 16 + p % 16)
    step.slot_mapping = np.array(slots, np.int64)
    for b, (c, _) in enumerate(step.lens):
        for p in range(c):
            blk = step.block_table[b, p // 16]
            step.cache[0, blk, p % 16] = step.k_full[b][p]
            step.cache[1, blk, p % 16] = step.v_full[b][p]
    out, md = run_step(cpu, step, f32_layer(step), prefix=32)
    assert md.use_cascade == 1 and md.common_prefix_len == 32
    assert "cascade" in md.describe()
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_f16(cpu, rng):
    step = PagedStep(rng, [(20, 7), (0, 11)], 8, 2, 64)
    layer = fa.Layer(num_heads_q=8, num_heads_kv=2, head_size=64, dtype=fa.DType.F16)
    cache = step.cache.astype(np.float16)
    q, k, v = step.q.astype(np.float16), step.k.astype(np.float16), step.v.astype(np.float16)
    # the reference sees the f16-rounded inputs
    for b, (c, n) in enumerate(step.lens):
        step.k_full[b] = step.k_full[b].astype(np.float16).astype(np.float32)
        step.v_full[b] = step.v_full[b].astype(np.float16).astype(np.float32)
        step.q_list[b] = step.q_list[b].astype(np.float16).astype(np.float32)
    out, _ = run_step(cpu, step, layer, dtype=fa.DType.F16, cache=cache, q=q, k=k, v=v)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), step.reference(), rtol=2e-3, atol=2e-3)


def test_bf16_bits(cpu, rng):
    step = PagedStep(rng, [(24, 1), (0, 9)], 4, 2, 64)
    layer = fa.Layer(num_heads_q=4, num_heads_kv=2, head_size=64, dtype=fa.DType.BF16)
    bf = lambda x: fa.as_tensor(f32_to_bf16_bits(x), "x", dtype=fa.DType.BF16)
    for b in range(len(step.lens)):
        step.k_full[b] = bf16_bits_to_f32(f32_to_bf16_bits(step.k_full[b]))
        step.v_full[b] = bf16_bits_to_f32(f32_to_bf16_bits(step.v_full[b]))
        step.q_list[b] = bf16_bits_to_f32(f32_to_bf16_bits(step.q_list[b]))
    out, _ = run_step(cpu, step, layer, dtype=fa.DType.BF16, cache=bf(step.cache), q=bf(step.q),
                      k=bf(step.k), v=bf(step.v))
    np.testing.assert_allclose(bf16_bits_to_f32(out), step.reference(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("cache_dtype,fmt", [(fa.CacheDType.FP8_E4M3, fa.DType.FP8_E4M3),
                                             (fa.CacheDType.FP8_E5M2, fa.DType.FP8_E5M2)],
                         ids=["e4m3", "e5m2"])
def test_fp8_cache(cpu, rng, cache_dtype, fmt):
    step = PagedStep(rng, [(0, 9), (0, 4)], 4, 2, 32)
    layer = fa.Layer(num_heads_q=4, num_heads_kv=2, head_size=32, dtype=fa.DType.F32,
                     kv_cache_dtype=cache_dtype, k_scale=0.5, v_scale=0.25)
    assert layer.cache_dtype == fmt
    cache = np.zeros((2, step.num_blocks, 16, 2, 32), np.uint8)
    out, _ = run_step(cpu, step, layer, cache=fa.as_tensor(cache, "kv_cache", dtype=fmt),
                      cache_dtype=cache_dtype)
    # the cache holds exactly the library's fp8 encoding of k / scale
    table = np.array([fa.fp8_to_float(i, fmt) for i in range(256)], np.float64)
    for t, s in enumerate(step.slot_mapping):
        blk, row = divmod(int(s), 16)
        want_k = [fa.float_to_fp8(x / 0.5, fmt) for x in step.k[t].ravel()]
        want_v = [fa.float_to_fp8(x / 0.25, fmt) for x in step.v[t].ravel()]
        assert cache[0, blk, row].ravel().tolist() == want_k
        assert cache[1, blk, row].ravel().tolist() == want_v
    # attention reads x8 * scale: the reference over the decoded values
    for b, (c, n) in enumerate(step.lens):
        rows = [divmod(int(s), 16) for s in step.slot_mapping[step.query_start_loc[b]:
                                                              step.query_start_loc[b + 1]]]
        step.k_full[b] = np.stack([table[cache[0, blk, r]] * 0.5 for blk, r in rows])
        step.v_full[b] = np.stack([table[cache[1, blk, r]] * 0.25 for blk, r in rows])
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_hnd_cache_layout(cpu, rng):
    step = PagedStep(rng, [(30, 5), (2, 1)], 4, 2, 64)
    # physical (2, NB, Hkv, bs, D), seen through its logical [2, NB, bs, Hkv, D] view
    phys = np.ascontiguousarray(step.cache.transpose(0, 1, 3, 2, 4))
    logical = phys.transpose(0, 1, 3, 2, 4)
    strides = tuple(s // 4 for s in logical.strides)
    assert strides == fa.kv_cache_strides(fa.KVLayout.HND, step.num_blocks, 16, 2, 64)
    out, _ = run_step(cpu, step, f32_layer(step), cache=logical, layout=fa.KVLayout.HND)
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)
    # the new tokens were written through the strided view
    for t, s in enumerate(step.slot_mapping):
        blk, row = divmod(int(s), 16)
        np.testing.assert_array_equal(phys[0, blk, :, row], step.k[t])


def test_strided_q_slice_of_fused_qkv(cpu, rng):
    # q, k, v as column slices of one [T, (Hq + 2 Hkv) * D] projection
    step = PagedStep(rng, [(12, 6), (0, 3)], 4, 2, 32)
    fused = np.concatenate([step.q.reshape(step.T, -1), step.k.reshape(step.T, -1),
                            step.v.reshape(step.T, -1)], axis=1)
    q = fused[:, :128].reshape(step.T, 4, 32)
    k = fused[:, 128:192].reshape(step.T, 2, 32)
    v = fused[:, 192:].reshape(step.T, 2, 32)
    assert q.strides[0] == fused.strides[0]
    out, _ = run_step(cpu, step, f32_layer(step), q=q, k=k, v=v)
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)


def test_encoder_dense(cpu, rng):
    t, h, d = 10, 4, 64
    q = rng.standard_normal((t, h, d)).astype(np.float32)
    k = rng.standard_normal((t, h, d)).astype(np.float32)
    v = rng.standard_normal((t, h, d)).astype(np.float32)
    layer = fa.Layer(num_heads_q=h, head_size=d, dtype=fa.DType.F32,
                     attn_type=fa.AttnType.ENCODER_ONLY)
    b = fa.Builder(cpu, num_heads_q=h, head_size=d, dtype=fa.DType.F32)
    md = b.build(query_start_loc=[0, 4, 10], seq_lens=[4, 6])
    out = np.zeros_like(q)
    fa.forward(layer, cpu, q, k, v, None, md, out)
    r0, _ = attention_ref(q[:4], k[:4], v[:4], causal=False)
    r1, _ = attention_ref(q[4:], k[4:], v[4:], causal=False)
    np.testing.assert_allclose(out, np.concatenate([r0, r1]), rtol=2e-5, atol=2e-5)


def test_forward_profile(cpu, rng):
    layer = fa.Layer(num_heads_q=4, num_heads_kv=2, head_size=64, dtype=fa.DType.F32)
    out = rng.standard_normal((9, 4, 64)).astype(np.float32)
    fa.forward_profile(layer, cpu, out)
    assert not out.any()


def test_lists_as_device_arrays(cpu, rng):
    # the CPU backend reads host memory: plain lists work for the block table and slots
    step = PagedStep(rng, [(5, 3)], 4, 2, 32)
    b = fa.Builder(cpu, num_heads_q=4, num_heads_kv=2, head_size=32, dtype=fa.DType.F32)
    md = b.build(query_start_loc=step.query_start_loc.tolist(), seq_lens=step.seq_lens.tolist(),
                 block_table=step.block_table.tolist(), slot_mapping=step.slot_mapping.tolist())
    out = np.zeros_like(step.q)
    fa.forward(f32_layer(step), cpu, step.q, step.k, step.v, step.cache, md, out)
    np.testing.assert_allclose(out, step.reference(), rtol=2e-5, atol=2e-5)
