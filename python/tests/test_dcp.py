"""Decode-context parallelism through the binding: N CPU-backend ranks in threads of this
process, joined by the fake comm, each holding its shard of the KV cache; every rank's output
(its query heads) against the float64 reference over the whole context."""
import threading

import numpy as np
import pytest

import flashattn as fa
from reference import attention_ref


def run_dcp(rng, world, lens, heads_per_rank, hkv, d, bs=16, interleave=1):
    n = len(lens)
    seq = [c + q for c, q in lens]
    cols = max(-(-s // (bs * world)) for s in seq)
    num_blocks = n * cols + 1
    # each rank's own block table (its local blocks), shuffled
    tables = [rng.permutation(num_blocks)[:n * cols].reshape(n, cols).astype(np.int32)
              for _ in range(world)]
    k_full = [rng.standard_normal((s, hkv, d)).astype(np.float32) for s in seq]
    v_full = [rng.standard_normal((s, hkv, d)).astype(np.float32) for s in seq]
    qsl = np.concatenate([[0], np.cumsum([q for _, q in lens])]).astype(np.int32)
    t = int(qsl[-1])
    q_rank = [rng.standard_normal((t, heads_per_rank, d)).astype(np.float32) for _ in range(world)]
    k_new = np.concatenate([kf[c:] for kf, (c, _) in zip(k_full, lens)])
    v_new = np.concatenate([vf[c:] for vf, (c, _) in zip(v_full, lens)])
    req = [b for b, (_, q) in enumerate(lens) for _ in range(q)]
    pos = [p for c, q in lens for p in range(c, c + q)]
    caches, slots = [], []
    for r in range(world):
        cache = rng.standard_normal((2, num_blocks, bs, hkv, d)).astype(np.float32)
        for b, (c, _) in enumerate(lens):  # this rank's share of the context
            ctx = fa.dcp_slot_mapping(tables[r][b:b + 1], bs, [0] * c, list(range(c)), world, r,
                                      interleave) if c else []
            for p, s in enumerate(ctx):
                if s >= 0:
                    cache[0, s // bs, s % bs] = k_full[b][p]
                    cache[1, s // bs, s % bs] = v_full[b][p]
        caches.append(cache)
        slots.append(np.array(fa.dcp_slot_mapping(tables[r], bs, req, pos, world, r, interleave),
                              np.int64))
    group = fa.FakeCommGroup(world, timeout_ms=20000)
    outs = [np.zeros((t, heads_per_rank, d), np.float32) for _ in range(world)]
    errors = [None] * world
    backends = [fa.Backend.cpu() for _ in range(world)]
    builders, layers, mds = [], [], []
    for r in range(world):
        cfg = fa.config(num_heads_q=heads_per_rank, num_heads_kv=hkv, head_size=d,
                        dtype=fa.DType.F32, block_size=bs, dcp_world_size=world, dcp_rank=r,
                        cp_kv_cache_interleave_size=interleave, max_num_seqs=8,
                        max_num_batched_tokens=64)
        b = fa.Builder(backends[r], cfg, comm=group.comm(r))
        builders.append(b)
        layers.append(b.layer())
        mds.append(b.build(query_start_loc=qsl, seq_lens=seq, block_table=tables[r],
                           slot_mapping=slots[r]))

    def rank(r):
        try:
            fa.forward(layers[r], backends[r], q_rank[r], k_new, v_new, caches[r], mds[r], outs[r])
        except fa.Error as e:
            errors[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [None] * world, errors
    for r in range(world):
        ref = np.concatenate([attention_ref(q_rank[r][qsl[b]:qsl[b + 1]], k_full[b], v_full[b])[0]
                              for b in range(n)])
        np.testing.assert_allclose(outs[r], ref, rtol=3e-5, atol=3e-5)
        assert mds[r].dcp_world_size == world and mds[r].dcp_rank == r
    # the new tokens went into the rank that owns their position
    for r in range(world):
        for i, s in enumerate(slots[r]):
            if s >= 0:
                np.testing.assert_array_equal(caches[r][0, s // bs, s % bs], k_new[i])
    for b in builders:
        b.close()
    group.close()


@pytest.mark.parametrize("world,interleave", [(2, 1), (4, 2)], ids=["dcp2", "dcp4-i2"])
def test_dcp_decode_and_prefill(rng, world, interleave):
    run_dcp(rng, world, [(70, 1), (33, 4), (0, 6), (129, 1)], heads_per_rank=4, hkv=2, d=64,
            interleave=interleave)


def test_dcp_comm_required(cpu):
    with pytest.raises(fa.Error) as e:
        fa.Builder(cpu, num_heads_q=4, head_size=64, dcp_world_size=2, dcp_rank=0)
    assert "comm" in e.value.message


def test_fake_comm_group_errors():
    with pytest.raises(fa.Error):
        fa.FakeCommGroup(0)
    g = fa.FakeCommGroup(2)
    with pytest.raises(fa.Error, match="rank 2"):
        g.comm(2)
    assert not g.aborted
    g.close()
