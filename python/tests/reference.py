"""An independent float64 NumPy reference of flashattn's attention (docs/semantics.md §1, §3),
and helpers that lay out a paged step (cache, block table, slot mapping) on the host."""
import numpy as np


def attention_ref(q, k, v, causal=True, window=(-1, -1), scale=None, softcap=0.0, sinks=None,
                  alibi=None):
    """One sequence: q [Lq, Hq, D], k / v [Lk, Hkv, D] -> (out [Lq, Hq, D], lse [Hq, Lq]),
    float64. Bottom-right aligned mask; GQA head h reads KV head h // (Hq / Hkv)."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    g = hq // hkv
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    wl, wr = window
    if causal:
        wr = 0
    i = np.arange(lq)[:, None]
    j = np.arange(lk)[None, :]
    diag = i + lk - lq
    allowed = np.ones((lq, lk), bool)
    if wl >= 0:
        allowed &= j >= diag - wl
    if wr >= 0:
        allowed &= j <= diag + wr
    out = np.zeros((lq, hq, d))
    lse = np.full((hq, lq), -np.inf)
    for h in range(hq):
        s = scale * q[:, h, :] @ k[:, h // g, :].T
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if alibi is not None:
            s = s - alibi[h] * np.abs(diag - j)
        s = np.where(allowed, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        if sinks is not None:
            m = np.maximum(m, sinks[h])
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(s - m)
        den = p.sum(axis=1, keepdims=True)
        if sinks is not None:
            den = den + np.exp(sinks[h] - m)
        with np.errstate(invalid="ignore", divide="ignore"):
            o = np.where(den > 0, (p @ v[:, h // g, :]) / np.where(den > 0, den, 1), 0.0)
            lse[h] = np.where(den[:, 0] > 0, (m + np.log(np.where(den > 0, den, 1)))[:, 0], -np.inf)
        out[:, h, :] = o
    return out, lse


def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


class PagedStep:
    """A step of num_reqs requests with (context, query) lengths: random keys and values for
    every position, a shuffled block table, the cached context written straight into the cache,
    and the new tokens' q / k / v with their slot mapping."""

    def __init__(self, rng, lens, num_heads_q, num_heads_kv, head_size, block_size=16,
                 num_blocks=None, dtype=np.float32, extra_blocks=3):
        self.lens = lens
        self.hq, self.hkv, self.d, self.bs = num_heads_q, num_heads_kv, head_size, block_size
        seq = [c + n for c, n in lens]
        blocks_per = [-(-s // block_size) for s in seq]
        max_blocks = max(max(blocks_per), 1)
        total = sum(blocks_per) + extra_blocks
        self.num_blocks = num_blocks or total
        perm = rng.permutation(self.num_blocks).astype(np.int32)
        self.block_table = np.zeros((len(lens), max_blocks), np.int32)
        pos = 0
        for b, nb in enumerate(blocks_per):
            self.block_table[b, :nb] = perm[pos:pos + nb]
            self.block_table[b, nb:] = perm[pos] if nb else 0
            pos += nb
        self.k_full = [rng.standard_normal((s, num_heads_kv, head_size)).astype(np.float32)
                       for s in seq]
        self.v_full = [rng.standard_normal((s, num_heads_kv, head_size)).astype(np.float32)
                       for s in seq]
        self.q_list = [rng.standard_normal((n, num_heads_q, head_size)).astype(np.float32)
                       for _, n in lens]
        self.query_start_loc = np.concatenate([[0], np.cumsum([n for _, n in lens])]).astype(
            np.int32)
        self.seq_lens = np.array(seq, np.int32)
        self.T = int(self.query_start_loc[-1])
        self.q = np.concatenate(self.q_list) if self.T else np.zeros((0, num_heads_q, head_size),
                                                                        np.float32)
        self.k = np.concatenate([kf[c:] for kf, (c, _) in zip(self.k_full, lens)])
        self.v = np.concatenate([vf[c:] for vf, (c, _) in zip(self.v_full, lens)])
        slots = []
        for b, (c, n) in enumerate(lens):
            for p in range(c, c + n):
                slots.append(int(self.block_table[b, p // block_size]) * block_size + p % block_size)
        self.slot_mapping = np.array(slots, np.int64)
        # the cache, with a random (finite) background and the contexts in place
        self.cache = rng.standard_normal((2, self.num_blocks, block_size, num_heads_kv,
                                          head_size)).astype(np.float32)
        for b, (c, _) in enumerate(lens):
            for p in range(c):
                blk, row = self.block_table[b, p // block_size], p % block_size
                self.cache[0, blk, row] = self.k_full[b][p]
                self.cache[1, blk, row] = self.v_full[b][p]

    def reference(self, **kw):
        outs = []
        for b in range(len(self.lens)):
            o, _ = attention_ref(self.q_list[b], self.k_full[b], self.v_full[b], **kw)
            outs.append(o)
        return np.concatenate(outs)
