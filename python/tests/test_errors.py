"""Failures raise flashattn.Error with the status and a message naming the argument: the
library's own (fa_last_error()) and the binding's checks alike."""
import numpy as np
import pytest

import flashattn as fa


def raises(status, *words):
    class Ctx:
        def __enter__(self):
            self.cm = pytest.raises(fa.Error)
            self.info = self.cm.__enter__()
            return self.info

        def __exit__(self, *exc):
            r = self.cm.__exit__(*exc)
            e = self.info.value
            assert e.status == status, str(e)
            for w in words:
                assert w in e.message, (w, e.message)
            return r
    return Ctx()


def test_layer_bad_head_size():
    with raises(fa.Status.ERR_INVALID_ARG, "fa_layer_init", "head_size 100"):
        fa.Layer(num_heads_q=4, head_size=100)


def test_layer_kv_heads_do_not_divide():
    with raises(fa.Status.ERR_INVALID_ARG, "num_heads_kv"):
        fa.Layer(num_heads_q=6, num_heads_kv=4, head_size=64)


def test_layer_sinks_count():
    with raises(fa.Status.ERR_INVALID_ARG, "sinks"):
        fa.Layer(num_heads_q=4, head_size=64, sinks=[0.0, 1.0])


def test_layer_bad_alibi_array():
    with raises(fa.Status.ERR_INVALID_ARG, "alibi_slopes", "float64"):
        fa.Layer(num_heads_q=4, head_size=64, alibi_slopes=np.zeros(4, np.float64))


def test_config_unknown_field():
    with raises(fa.Status.ERR_INVALID_ARG, "config", "num_heads"):
        fa.config(num_heads=4)


def test_config_resolve_error():
    with raises(fa.Status.ERR_INVALID_ARG, "config: ", "head_size 100"):
        fa.config_resolve(fa.config(num_heads_q=4, head_size=100))
    with raises(fa.Status.ERR_INVALID_ARG, "config: ", "dcp_rank"):
        fa.config_resolve(fa.config(num_heads_q=4, head_size=64, dcp_world_size=2, dcp_rank=2))


def test_builder_bad_config(cpu):
    with raises(fa.Status.ERR_INVALID_ARG, "head_size"):
        fa.Builder(cpu, num_heads_q=4, head_size=12)


def test_builder_not_a_backend():
    with raises(fa.Status.ERR_INVALID_ARG, "backend"):
        fa.Builder("cpu", num_heads_q=4, head_size=64)


def test_build_bad_query_start_loc(cpu):
    b = fa.Builder(cpu, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    with raises(fa.Status.ERR_INVALID_ARG, "fa_builder_build", "query_start_loc"):
        b.build(query_start_loc=[1, 3], seq_lens=[3], block_table=[[0]], slot_mapping=[0, 1])


def test_build_length_mismatch(cpu):
    b = fa.Builder(cpu, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    with raises(fa.Status.ERR_INVALID_ARG, "query_start_loc", "seq_lens"):
        b.build(query_start_loc=[0, 3, 4], seq_lens=[3], block_table=[[0]], slot_mapping=[0])


def test_build_seq_too_long_for_table(cpu):
    b = fa.Builder(cpu, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    with raises(fa.Status.ERR_INVALID_ARG, "seq_lens"):
        b.build(query_start_loc=[0, 1], seq_lens=[40], block_table=[[0, 1]], slot_mapping=[0])


def test_build_not_integers(cpu):
    b = fa.Builder(cpu, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    with raises(fa.Status.ERR_INVALID_ARG, "seq_lens", "integers"):
        b.build(query_start_loc=[0, 1], seq_lens=["x"], block_table=[[0]], slot_mapping=[0])


def test_build_common_prefix_not_block_multiple(cpu):
    b = fa.Builder(cpu, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    with raises(fa.Status.ERR_INVALID_ARG, "common_prefix_len"):
        b.build(query_start_loc=[0, 1], seq_lens=[40], block_table=[[0, 1, 2]], slot_mapping=[0],
                common_prefix_len=5)


def _setup(cpu, dtype=fa.DType.F32):
    b = fa.Builder(cpu, num_heads_q=4, num_heads_kv=2, head_size=64, dtype=dtype)
    layer = fa.Layer(num_heads_q=4, num_heads_kv=2, head_size=64, dtype=dtype)
    md = b.build(query_start_loc=[0, 3], seq_lens=[3], block_table=[[1]], slot_mapping=[16, 17, 18])
    q = np.ones((3, 4, 64), np.float32)
    k = np.ones((3, 2, 64), np.float32)
    cache = np.zeros((2, 2, 16, 2, 64), np.float32)
    return b, layer, md, q, k, cache


def test_forward_wrong_q_heads(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "fa_forward", "q"):
        fa.forward(layer, cpu, np.ones((3, 2, 64), np.float32), k, k, cache, md, q.copy())


def test_forward_wrong_dtype(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "fa_forward", "out"):
        fa.forward(layer, cpu, q, k, k, cache, md, np.zeros((3, 4, 64), np.float16))


def test_forward_bad_cache_shape(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "kv_cache"):
        fa.forward(layer, cpu, q, k, k, cache[:, :, :8], md, q.copy())


def test_forward_stale_metadata(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    b.build(query_start_loc=[0, 3], seq_lens=[3], block_table=[[1]], slot_mapping=[16, 17, 18])
    with raises(fa.Status.ERR_INVALID_ARG, "fa_forward"):
        fa.forward(layer, cpu, q, k, k, cache, md, q.copy())


def test_forward_destroyed_builder(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    b.close()
    with raises(fa.Status.ERR_INVALID_ARG, "fa_forward"):
        fa.forward(layer, cpu, q, k, k, cache, md, q.copy())


def test_forward_nothing_written_on_error(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    out = np.full((3, 4, 64), 5.0, np.float32)
    with pytest.raises(fa.Error):
        fa.forward(layer, cpu, q, k, None, cache, md, out)  # k without v
    assert (out == 5.0).all() and not cache.any()


def test_forward_md_none(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "md"):
        fa.forward(layer, cpu, q, k, k, cache, None, q.copy())


def test_forward_not_an_array(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "q:", "not an array"):
        fa.forward(layer, cpu, "q", k, k, cache, md, q.copy())


def test_forward_float64(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "q:", "<f8"):
        fa.forward(layer, cpu, q.astype(np.float64), k, k, cache, md, q.copy())


def test_forward_int16_needs_dtype(cpu):
    b, layer, md, q, k, cache = _setup(cpu)
    with raises(fa.Status.ERR_INVALID_ARG, "q:", "dtype"):
        fa.forward(layer, cpu, q.view(np.int16), k, k, cache, md, q.copy())


def test_backend_op_failure_injected(rng):
    be = fa.Backend.cpu(fail_op=fa.Op.ATTENTION, fail_op_at=1)
    b, layer, md, q, k, cache = _setup(be)
    with raises(fa.Status.ERR_BACKEND, "backend 'cpu' op 'attention' failed", "injected"):
        fa.forward(layer, be, q, k, k, cache, md, q.copy())
    be.close()


def test_builder_alloc_failure():
    be = fa.Backend.cpu(fail_alloc_at=1)
    with raises(fa.Status.ERR_OUT_OF_MEMORY, "alloc"):
        fa.Builder(be, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    be.close()


def test_backend_closed_first_closes_builders():
    be = fa.Backend.cpu()
    b = fa.Builder(be, num_heads_q=4, head_size=64, dtype=fa.DType.F32)
    be.close()
    with raises(fa.Status.ERR_INVALID_ARG, "builder", "close"):
        b.build(query_start_loc=[0, 1], seq_lens=[1])
    with raises(fa.Status.ERR_INVALID_ARG, "backend", "close"):
        be.name


def test_cache_shape_error():
    with raises(fa.Status.ERR_INVALID_ARG, "fa_kv_cache_shape", "block_size"):
        fa.kv_cache_shape(4, 0, 2, 64)


def test_reshape_and_cache_slot_out_of_range(cpu):
    k = np.ones((2, 2, 64), np.float32)
    cache = np.zeros((2, 1, 16, 2, 64), np.float32)
    with raises(fa.Status.ERR_INVALID_ARG, "reshape_and_cache", "slot"):
        fa.reshape_and_cache(cpu, k, k, cache, np.array([3, 16], np.int64))
    assert not cache.any()


def test_error_str_has_status_and_message():
    e = fa.Error(fa.Status.ERR_UNSUPPORTED, "head_size 100")
    assert e.status == 2 and "ERR_UNSUPPORTED" in str(e) and "head_size 100" in str(e)
    assert fa.last_error() == "" or isinstance(fa.last_error(), str)
