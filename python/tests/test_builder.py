"""Config, builder and metadata round trips; the helper and plan functions."""
import numpy as np
import pytest

import flashattn as fa


def test_config_round_trip():
    cfg = fa.config(num_heads_q=32, num_heads_kv=8, head_size=128, block_size=32,
                    max_num_seqs=64, max_num_batched_tokens=2048, attention_chunk_size=0)
    d = fa.config_dict(cfg)
    assert d["num_heads_q"] == 32 and d["block_size"] == 32 and d["max_num_seqs"] == 64
    assert fa.config_dict(fa.config(**d)) == d
    r = fa.config_dict(fa.config_resolve(cfg))
    assert r["max_num_splits"] == 32 and r["max_cudagraph_capture_size"] == 512
    assert r["dcp_world_size"] == 1 and r["cp_kv_cache_interleave_size"] == 1


def test_builder_config_resolved(cpu):
    b = fa.Builder(cpu, {"num_heads_q": 8, "head_size": 64, "dtype": fa.DType.F32})
    c = b.config
    assert c["num_heads_kv"] == 8 and c["block_size"] == 16 and c["max_num_seqs"] == 256
    assert c == fa.config_dict(fa.config_resolve(fa.config(num_heads_q=8, head_size=64,
                                                           dtype=fa.DType.F32)))


def test_workspace_size_grows_with_batch():
    small = fa.builder_workspace_size(fa.config(num_heads_q=8, head_size=64,
                                                max_num_batched_tokens=256))
    big = fa.builder_workspace_size(fa.config(num_heads_q=8, head_size=64,
                                              max_num_batched_tokens=4096))
    assert 0 < small < big


def test_metadata_fields(cpu):
    b = fa.Builder(cpu, num_heads_q=8, num_heads_kv=2, head_size=64, dtype=fa.DType.F32,
                   max_num_seqs=8)
    qsl = np.array([0, 1, 8, 9], np.int32)
    seq = np.array([33, 7, 100], np.int32)
    bt = np.arange(21, dtype=np.int32).reshape(3, 7)
    md = b.build(query_start_loc=qsl, seq_lens=seq, block_table=bt,
                 slot_mapping=np.arange(9, dtype=np.int64))
    assert (md.num_reqs, md.num_actual_tokens, md.max_query_len, md.max_seq_len,
            md.min_query_len) == (3, 9, 7, 100, 1)
    assert md.block_table_stride == 7 and md.generation == 1
    assert md.builder_id != 0 and md.causal == fa.Causal.AUTO
    assert md.use_cascade == 0 and md.dcp_world_size == 1
    text = md.describe()
    assert text.startswith("3 requests, 9 tokens") and "split" in text
    assert fa.describe(md) == text
    md2 = b.build(query_start_loc=qsl, seq_lens=seq, block_table=bt,
                  slot_mapping=np.arange(9, dtype=np.int64))
    assert md2.generation == 2 and md2.builder_id == md.builder_id


def test_block_table_column_slice(cpu):
    # a [R, 8] table of which 3 columns are valid: stride 8, max_blocks 3
    b = fa.Builder(cpu, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    bt = np.arange(16, dtype=np.int32).reshape(2, 8)
    md = b.build(query_start_loc=[0, 1, 2], seq_lens=[40, 3], block_table=bt[:, :3],
                 slot_mapping=[0, 1])
    assert md.block_table_stride == 8
    with pytest.raises(fa.Error) as e:
        b.build(query_start_loc=[0, 1, 2], seq_lens=[49, 3], block_table=bt[:, :3],
                slot_mapping=[0, 1])
    assert "seq_lens" in e.value.message


def test_cascade_prefix_len_and_build(cpu):
    # 64 decodes sharing 64 blocks of 16: the heuristic takes cascade (132 nominal SMs)
    n = 64
    b = fa.Builder(cpu, num_heads_q=32, num_heads_kv=8, head_size=128, dtype=fa.DType.F32,
                   max_num_seqs=n, max_num_batched_tokens=n)
    layer = fa.Layer(num_heads_q=32, num_heads_kv=8, head_size=128, dtype=fa.DType.F32)
    b.set_layers([layer])
    bt = np.zeros((n, 80), np.int32)
    bt[:, :64] = np.arange(64)
    for r in range(n):
        bt[r, 64:] = 64 + r * 16 + np.arange(16)
    batch = fa.Batch(cpu, query_start_loc=np.arange(n + 1, dtype=np.int32),
                     seq_lens=np.full(n, 1100, np.int32), block_table=bt,
                     slot_mapping=np.arange(n, dtype=np.int64))
    p = b.cascade_prefix_len(64, batch)
    assert p == 1024
    md = b.build(batch, common_prefix_len=p)
    assert md.use_cascade == 1 and md.common_prefix_len == 1024
    assert "cascade" in md.describe()
    # a windowed model never takes cascade
    b.set_layers([fa.Layer(num_heads_q=32, num_heads_kv=8, head_size=128, dtype=fa.DType.F32,
                           sliding_window=256)])
    assert b.cascade_prefix_len(64, batch) == 0


def test_plan_helpers(cpu):
    assert fa.kv_cache_shape(10, 16, 4, 128) == (2, 10, 16, 4, 128)
    assert fa.kv_cache_stride_order(fa.KVLayout.HND) == (0, 1, 3, 2, 4)
    assert fa.kv_cache_stride_order(fa.KVLayout.NHD, include_num_layers=True) == (2, 0, 1, 3, 4, 5)
    assert fa.kv_cache_strides(fa.KVLayout.NHD, 10, 16, 4, 128) == (81920, 8192, 512, 128, 1)
    assert fa.sliding_window_config(4096) == (4095, 0)
    assert fa.sliding_window_config(8, fa.AttnType.ENCODER_ONLY) == (7, 7)
    assert fa.aot_sliding_window([(7, 0), (7, 0)]) == (True, (7, 0))
    assert fa.aot_sliding_window([(7, 0), (-1, -1)]) == (False, (-1, -1))
    assert fa.supports_head_size(128) and not fa.supports_head_size(100)
    any_size = fa.supported_kernel_block_sizes()
    assert any_size["sizes"] == [] and any_size["multiple_of"] >= 1
    assert fa.supported_kernel_block_sizes(True) == {"multiple_of": 0, "sizes": [16, 32, 64]}
    assert fa.supports_block_size(32) and not fa.supports_block_size(0)
    assert not fa.supports_block_size(48, hybrid_mamba_f32=True)
    assert fa.supports_kv_cache_dtype(fa.CacheDType.FP8_E5M2)
    assert fa.supports_compute_capability(9, 0) and not fa.supports_compute_capability(7, 5)
    assert fa.cache_storage_dtype(fa.CacheDType.FP8) == fa.DType.FP8_E4M3
    assert fa.cache_storage_dtype(fa.CacheDType.AUTO, fa.DType.F16) == fa.DType.F16
    assert fa.check_combination(cpu, 128, fa.DType.BF16) is None
    assert "head" in fa.check_combination(None, 100, fa.DType.BF16)
    assert fa.dtype_size(fa.DType.BF16) == 2 and fa.dtype_name(fa.DType.FP8_E5M2) == "fp8_e5m2"
    # the worked example of the cascade heuristic in flashattn.h
    assert fa.use_cascade_attention(1024, [1] * 64, 32, 8, 132)
    assert not fa.use_cascade_attention(256, [1] * 8, 32, 8, 132)
    assert fa.cascade_prefix_len(64, 16, [1099] * 64, [1] * 64, 32, 8, 132) == 1024
    assert fa.num_splits_heuristic(1, 132, 100, 32) > 1
    plan = fa.plan_splits(cpu, [0, 1, 2], [4000, 10], 8, 2, 64)
    assert plan[0] >= plan[1] > 1 and plan[2] == 1


def test_dcp_helpers():
    assert fa.dcp_local_seq_len(10, 2, 0) == 5
    assert fa.dcp_local_seq_lens([10, 3], 2, 1, interleave=2) == [4, 1]
    slots = fa.dcp_slot_mapping([[3, 5]], 4, [0, 0, 0], [0, 1, 2], world_size=2, rank=0)
    assert slots == [12, -1, 13]


def test_local_virtual_batches():
    # SEMANTICS §8's example: chunk 4, block size 2
    r = fa.local_virtual_batches(4, 2, [0, 4, 14, 16], [5, 10, 9],
                                 [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]])
    assert r["num_virtual"] == sum(1 for _ in r["seqused_k"]) and r["pages_per_virtual"] == 2
    assert r["cu_seqlens_q"][0] == 0 and r["cu_seqlens_q"][-1] == 16
    assert all(0 < k <= 4 for k in r["seqused_k"])


def test_layer_from_config(cpu):
    cfg = fa.config(num_heads_q=8, num_heads_kv=2, head_size=64, dtype=fa.DType.F32,
                    cache_dtype=fa.CacheDType.FP8_E5M2)
    layer = fa.Layer.from_config(cfg)
    d = layer.desc
    assert (d["num_heads_q"], d["num_heads_kv"], d["head_size"], d["dtype"]) == (8, 2, 64, 2)
    assert layer.cache_dtype == fa.DType.FP8_E5M2 and layer.window == (-1, -1)
    w = fa.Layer.from_config(cfg, sliding_window=128)
    assert w.window == (127, 0) and w.desc["num_heads_kv"] == 2
    b = fa.Builder(cpu, cfg)
    assert b.layer(logits_soft_cap=30.0).desc["logits_soft_cap"] == 30.0
    assert fa.Layer.from_config(b).desc == layer.desc
    with pytest.raises(fa.Error) as e:
        fa.Layer.from_config(cfg, dtype=fa.DType.F16)
    assert "fa_layer_init_from_config" in e.value.message and "dtype" in e.value.message
    with pytest.raises(fa.Error, match="unknown field"):
        fa.Layer.from_config(cfg, window=3)
