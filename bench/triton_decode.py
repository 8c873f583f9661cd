"""triton_decode.py - a paged decode peer for bench/peers.py, written in Triton the way paged
decode kernels of serving engines are (vLLM's Triton backend among them): one program per
(sequence, KV head, split) gathers the split's cache blocks through the block table, computes the
G query heads of the KV head against each block with tl.dot, keeps an online softmax in fp32 and
writes a partial output and its LSE; a second kernel merges the splits. Written for this project
from the algorithm (no code taken from any engine).

Inputs: q [B, Hq, D], k_cache / v_cache [num_blocks, BS, Hkv, D] (bf16), block_table [B, nb]
int32, seq_lens [B] int32. Output [B, Hq, D]. Needs BS >= 16 and D >= 16 (tl.dot's minimum).
"""

import triton
import triton.language as tl


@triton.jit
def _decode_split(Q, KC, VC, BT, SL, PO, PL, scale,
                  s_qb, s_qh, s_kb, s_ks, s_kh, s_bt, s_pob, s_poh, s_pos, s_plb, s_plh,
                  G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, NSPLIT: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    sp = tl.program_id(2)
    seqlen = tl.load(SL + b)
    nblk = tl.cdiv(seqlen, BS)
    per = tl.cdiv(nblk, NSPLIT)
    blk0 = sp * per
    blk1 = tl.minimum(blk0 + per, nblk)
    g = tl.arange(0, GP)
    d = tl.arange(0, D)
    r = tl.arange(0, BS)
    gmask = g < G
    q = tl.load(Q + b * s_qb + (kvh * G + g)[:, None] * s_qh + d[None, :], mask=gmask[:, None], other=0.0)
    m = tl.full([GP], float("-inf"), tl.float32)
    lsum = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    for blk in range(blk0, blk1):
        pid = tl.load(BT + b * s_bt + blk).to(tl.int64)
        pos = blk * BS + r
        valid = pos < seqlen
        off = pid * s_kb + r[:, None] * s_ks + kvh * s_kh + d[None, :]
        k = tl.load(KC + off, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(valid[None, :], s, float("-inf"))
        mn = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - mn[:, None])
        alpha = tl.exp(m - mn)
        lsum = lsum * alpha + tl.sum(p, 1)
        v = tl.load(VC + off, mask=valid[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = mn
    has = lsum > 0.0
    out = tl.where(has[:, None], acc / tl.where(has, lsum, 1.0)[:, None], 0.0)
    lse = tl.where(has, m + tl.log(tl.where(has, lsum, 1.0)), float("-inf"))
    h = kvh * G + g
    tl.store(PO + b * s_pob + h[:, None] * s_poh + sp * s_pos + d[None, :], out, mask=gmask[:, None])
    tl.store(PL + b * s_plb + h * s_plh + sp, lse, mask=gmask)


@triton.jit
def _decode_merge(PO, PL, O, s_pob, s_poh, s_pos, s_plb, s_plh, s_ob, s_oh,
                  D: tl.constexpr, NSPLIT: tl.constexpr, SP: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    sidx = tl.arange(0, SP)
    d = tl.arange(0, D)
    smask = sidx < NSPLIT
    lse = tl.load(PL + b * s_plb + h * s_plh + sidx, mask=smask, other=float("-inf"))
    mx = tl.max(lse, 0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.exp(lse - mx)
    w = tl.where(smask, w, 0.0)
    tot = tl.sum(w, 0)
    po = tl.load(PO + b * s_pob + h * s_poh + sidx[:, None] * s_pos + d[None, :], mask=smask[:, None], other=0.0)
    o = tl.sum(po * w[:, None], 0) / tl.where(tot > 0.0, tot, 1.0)
    tl.store(O + b * s_ob + h * s_oh + d, o.to(O.dtype.element_ty))


class PagedDecode:
    """One decode shape, prepared once: the paged cache, block table and workspaces; call() runs it."""

    def __init__(self, torch, q, k, v, block_size=16, num_sms=132):
        """q [B, Hq, 1, D], k / v [B, Hkv, L, D] (the peers' dense layout): the cache is built from
        them, blocks in order (block id = b * nb + j)."""
        B, Hq, _, D = q.shape
        Hkv, L = k.shape[1], k.shape[2]
        if L % block_size:
            raise ValueError("context %d is not a multiple of the block size %d" % (L, block_size))
        nb = L // block_size
        self.torch = torch
        self.q = q[:, :, 0, :].contiguous()
        self.kc = k.permute(0, 2, 1, 3).reshape(B * nb, block_size, Hkv, D).contiguous()
        self.vc = v.permute(0, 2, 1, 3).reshape(B * nb, block_size, Hkv, D).contiguous()
        self.bt = torch.arange(B * nb, device=q.device, dtype=torch.int32).view(B, nb)
        self.sl = torch.full((B,), L, device=q.device, dtype=torch.int32)
        self.G = Hq // Hkv
        self.GP = max(16, triton.next_power_of_2(self.G))
        self.D, self.BS, self.B, self.Hq, self.Hkv = D, block_size, B, Hq, Hkv
        want = max(1, (2 * num_sms + B * Hkv - 1) // (B * Hkv))
        self.nsplit = max(1, min(want, (nb + 3) // 4, 64))
        self.po = torch.empty((B, Hq, self.nsplit, D), device=q.device, dtype=torch.float32)
        self.pl = torch.empty((B, Hq, self.nsplit), device=q.device, dtype=torch.float32)
        self.out = torch.empty((B, Hq, D), device=q.device, dtype=q.dtype)
        self.scale = 1.0 / (D ** 0.5)

    def __call__(self):
        q, kc, po, pl, o = self.q, self.kc, self.po, self.pl, self.out
        _decode_split[(self.B, self.Hkv, self.nsplit)](
            q, kc, self.vc, self.bt, self.sl, po, pl, self.scale,
            q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2), self.bt.stride(0),
            po.stride(0), po.stride(1), po.stride(2), pl.stride(0), pl.stride(1),
            G=self.G, GP=self.GP, D=self.D, BS=self.BS, NSPLIT=self.nsplit)
        _decode_merge[(self.B, self.Hq)](
            po, pl, o, po.stride(0), po.stride(1), po.stride(2), pl.stride(0), pl.stride(1), o.stride(0),
            o.stride(1), D=self.D, NSPLIT=self.nsplit, SP=max(2, triton.next_power_of_2(self.nsplit)))
        return o.unsqueeze(2)
