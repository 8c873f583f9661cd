#!/usr/bin/env python3
"""decode_mw/emu_layouts.py - host-side desk check of decode_mw.cuh's index math (no GPU).

Emulates one warp on one key tile for every instance (head 64/128, bf16/fp8, NF = 1/2): the
cp.async chunk placement and swizzles, ldmatrix (.trans), the fp8 ld.shared + prmt + bit
conversion, movmatrix.trans and m16n8k16 with the fragment layouts of the PTX ISA, then compares
S^T = K Q^T and O^T = V^T P^T (and the output dim mapping of the combine) against numpy. Also
checks the E4M3 -> bf16 bit conversion on every finite E4M3 value, and (part 2) a float64 model
of the per-CTA algorithm (softmax, scale factors, warp and split combines) against softmax. The index expressions are
copies of the kernel's: a change there must be mirrored here. Needs numpy.

    python3 backends/cuda/attention/decode_mw/emu_layouts.py
"""
import numpy as np, struct
rng = np.random.default_rng(1)

def bf16_bits_to_float(b):
    return struct.unpack('<f', struct.pack('<I', (b & 0xffff) << 16))[0]

def e4m3_val(x):
    s = x >> 7; e = (x >> 3) & 15; m = x & 7
    v = (m / 8) * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0**(e - 7)
    return -v if s else v

def conv(w):
    lo = ((w << 8) & 0x80008000) | ((w << 4) & 0x07f007f0)
    hi = (w & 0x80008000) | ((w >> 4) & 0x07f007f0)
    return lo & 0xffffffff, hi & 0xffffffff

# exhaustive conversion check (bytes 0..255 in every position)
for x in range(256):
    if x in (0x7f, 0xff): continue
    for pos in range(4):
        w = x << (8 * pos)
        lo, hi = conv(w)
        reg = [lo, hi][pos & 1]; half = pos >> 1
        got = bf16_bits_to_float(reg >> (16 * half))
        assert got == e4m3_val(x) * 2.0**-120, (x, pos, got)
        other = bf16_bits_to_float(reg >> (16 * (1 - half)))
        assert other == 0.0
print("conversion: all 254 finite E4M3 values exact in all 4 byte positions")

def prmt(a, b, sel):
    by = [(a >> (8*i)) & 255 for i in range(4)] + [(b >> (8*i)) & 255 for i in range(4)]
    return sum(by[(sel >> (4*k)) & 7] << (8*k) for k in range(4))

def A_pos(l, i):  # (row, col pair start) of reg i
    g, t = l >> 2, l & 3
    return [(g, 2*t), (g+8, 2*t), (g, 2*t+8), (g+8, 2*t+8)][i]
def B_pos(l, i):  # (k start, n)
    g, t = l >> 2, l & 3
    return [(2*t, g), (2*t+8, g)][i]
def C_pos(l, i):
    g, t = l >> 2, l & 3
    return (g + 8*(i >> 1), 2*t + (i & 1))

def mma(C, A, B):
    # A[lane][4] of (lo, hi) floats, B[lane][2], C[lane][4] floats; returns new C
    Am = np.zeros((16, 16)); Bm = np.zeros((16, 8))
    for l in range(32):
        for i in range(4):
            r, c = A_pos(l, i); Am[r, c], Am[r, c+1] = A[l][i]
        for i in range(2):
            k, n = B_pos(l, i); Bm[k, n], Bm[k+1, n] = B[l][i]
    Cm = Am @ Bm
    return [[C[l][i] + Cm[C_pos(l, i)] for i in range(4)] for l in range(32)]

def ldsm(addr_of_lane, rd, trans):  # rd(addr) -> 8 elements of a 16-byte row
    out = [[None]*4 for _ in range(32)]
    for i in range(4):
        rows = [rd(addr_of_lane[8*i + j]) for j in range(8)]
        for l in range(32):
            g, t = l >> 2, l & 3
            if not trans: out[l][i] = (rows[g][2*t], rows[g][2*t+1])
            else: out[l][i] = (rows[2*t][g], rows[2*t+1][g])
    return out

def movm(X):  # X[lane] = (lo, hi) of fragment
    M = np.zeros((8, 8))
    for l in range(32):
        g, t = l >> 2, l & 3; M[g, 2*t], M[g, 2*t+1] = X[l]
    return [(M[2*(l&3), l>>2], M[2*(l&3)+1, l>>2]) for l in range(32)]

def run(D, FP8, NF, G):
    KT = 32 if D <= 64 else 16; ES = 1 if FP8 else 2; ROWB = D*ES; CPR = ROWB // 16
    KM, KS, MT = KT // 16, D // 16, D // 16
    nq = NF * 8
    if FP8:
        kb = rng.integers(0, 256, (KT, D)); vb = rng.integers(0, 256, (KT, D))
        kb[kb == 0x7f] = 0x7e; kb[kb == 0xff] = 0xfe; vb[vb == 0x7f] = 0x7e; vb[vb == 0xff] = 0xfe
        K = np.vectorize(e4m3_val)(kb); V = np.vectorize(e4m3_val)(vb)
    else:
        K = rng.integers(-8, 8, (KT, D)).astype(float); V = rng.integers(-8, 8, (KT, D)).astype(float)
    Q = np.zeros((nq, D)); Q[:G] = rng.integers(-4, 5, (G, D))
    # smem: K tile and V tile as byte arrays (bf16: store floats per element slot)
    sk = {}; sv = {}
    for lane in range(32):
        ch = lane % CPR
        for i in range(KT * CPR // 32):
            row = lane // CPR + (32 // CPR) * i
            kch = (ch ^ (row & (CPR - 1))) if FP8 else (ch ^ (row & 7))
            vch = ch if FP8 else kch
            for e in range(16 // ES):  # elements of the chunk
                d = ch * (16 // ES) + e
                sk[row*ROWB + kch*16 + e*ES] = kb[row, d] if FP8 else K[row, d]
                sv[row*ROWB + vch*16 + e*ES] = vb[row, d] if FP8 else V[row, d]
    assert len(sk) == KT * D and len(sv) == KT * D
    rd16 = lambda S: (lambda a: [S[a + 2*e] for e in range(8)])
    def word(S, a):  # 4 bytes little-endian
        return sum(int(S[a + k]) << (8*k) for k in range(4))
    # Q fragments
    qbl = [[[[None, None] for f in range(NF)] for s in range(KS)] for l in range(32)]
    for l in range(32):
        r, q = l >> 2, l & 3
        for f in range(NF):
            n = f*8 + r
            for s in range(KS):
                if not FP8:
                    qbl[l][s][f][0] = (Q[n, 16*s + 2*q], Q[n, 16*s + 2*q + 1])
                    qbl[l][s][f][1] = (Q[n, 16*s + 8 + 2*q], Q[n, 16*s + 8 + 2*q + 1])
                else:
                    d0 = 64*(s//4) + 16*q + 4*(s % 4)
                    sc = 2.0**64
                    qbl[l][s][f][0] = (Q[n, d0]*sc, Q[n, d0+2]*sc)
                    qbl[l][s][f][1] = (Q[n, d0+1]*sc, Q[n, d0+3]*sc)
    # S^T
    acc = [[[[0.0]*4 for l in range(32)] for f in range(NF)] for km in range(KM)]
    for km in range(KM):
        for s in range(KS):
            if not FP8:
                addr = [(km*16 + (l & 7) + ((l >> 3) & 1)*8)*ROWB + (((2*s + (l >> 4)) ^ (l & 7)) << 4) for l in range(32)]
                a = ldsm(addr, rd16(sk), False)
            else:
                a = []
                g, t = s // 4, s % 4
                for l in range(32):
                    r, q = l >> 2, l & 3
                    row = km*16 + r
                    pc = (4*g + q) ^ (row & (CPR - 1))
                    wl = word(sk, row*ROWB + pc*16 + 4*t); wh = word(sk, (row+8)*ROWB + pc*16 + 4*t)
                    a0, a2 = conv(wl); a1, a3 = conv(wh)
                    a.append([(bf16_bits_to_float(x), bf16_bits_to_float(x >> 16)) for x in (a0, a1, a2, a3)])
            for f in range(NF):
                acc[km][f] = mma(acc[km][f], a, [qbl[l][s][f] for l in range(32)])
    sc = 2.0**64 * 2.0**-120 if FP8 else 1.0
    ST = K @ Q.T * sc  # [KT][nq]
    for km in range(KM):
        for f in range(NF):
            for l in range(32):
                for i in range(4):
                    r, c = C_pos(l, i)
                    assert abs(acc[km][f][l][i] - ST[km*16 + r, f*8 + c]) <= 1e-9 * abs(ST).max(), ("S", D, FP8, NF)
    # P^T: small integers (exact in bf16) to check O^T = V^T P^T
    P = rng.integers(0, 4, (KT, nq)).astype(float)  # P^T[key][query]
    o = [[[[0.0]*4 for l in range(32)] for f in range(NF)] for mt in range(MT)]
    for km in range(KM):
        pb = []
        for f in range(NF):
            x0 = [None]*32; x1 = [None]*32
            for l in range(32):
                r, c0 = C_pos(l, 0); r2, _ = C_pos(l, 2)
                x0[l] = (P[km*16 + r, f*8 + c0], P[km*16 + r, f*8 + c0 + 1])
                x1[l] = (P[km*16 + r2, f*8 + c0], P[km*16 + r2, f*8 + c0 + 1])
            y0, y1 = movm(x0), movm(x1)
            pb.append([[y0[l], y1[l]] for l in range(32)])
        if not FP8:
            for mt in range(MT):
                addr = [(km*16 + (l & 7) + (l >> 4)*8)*ROWB + (((2*mt + ((l >> 3) & 1)) ^ (l & 7)) << 4) for l in range(32)]
                a = ldsm(addr, rd16(sv), True)
                for f in range(NF): o[mt][f] = mma(o[mt][f], a, pb[f])
        else:
            NWD = D // 32
            afr = [[None]*32 for _ in range(MT)]
            for l in range(32):
                r, q = l >> 2, l & 3
                x = [[word(sv, (km*16 + 2*q + (k & 1) + 8*(k >> 1))*ROWB + r*(D//8) + 4*i) for i in range(NWD)] for k in range(4)]
                for i in range(NWD):
                    for h in range(2):
                        sel = 0x5410 if h == 0 else 0x7632
                        a0, a1 = conv(prmt(x[0][i], x[1][i], sel)); a2, a3 = conv(prmt(x[2][i], x[3][i], sel))
                        afr[2*i + h][l] = [(bf16_bits_to_float(z), bf16_bits_to_float(z >> 16)) for z in (a0, a1, a2, a3)]
            for mt in range(MT):
                for f in range(NF): o[mt][f] = mma(o[mt][f], afr[mt], pb[f])
    OT = (V.T @ P) * (2.0**-120 if FP8 else 1.0)  # [D][nq]
    # output dim mapping as in the kernel's combine store
    got = np.full((nq, D), np.nan)
    for mt in range(MT):
        for f in range(NF):
            for l in range(32):
                r, q = l >> 2, l & 3
                for i in range(4):
                    n = f*8 + 2*q + (i & 1)
                    dim = r*(D//8) + 2*mt + (i >> 1) if FP8 else 16*mt + r + 8*(i >> 1)
                    assert np.isnan(got[n, dim])
                    got[n, dim] = o[mt][f][l][i]
    assert not np.isnan(got).any()
    err = abs(got - OT.T).max()
    assert err <= 1e-9 * max(1e-300, abs(OT).max()), ("O", D, FP8, NF, err)
    print(f"D={D} fp8={FP8} NF={NF} G={G}: S^T and O^T match")

for D in (64, 128):
    for FP8 in (False, True):
        run(D, FP8, 1, 4)
        run(D, FP8, 2, 16)

# ---- part 2: float64 model of the per-CTA algorithm (the kernel's formulas) vs plain softmax:
# warp tile assignment, masking, rounded-up maximum, fp8 scale factors (Q 2^64, logits 2^56, p 2^64
# offset, 1 / l times 2^120), warp combine, split partials and their combine.
np.seterr(all='ignore')
f32 = np.float32


def ru_mul(a, c):  # __fmul_ru approx: next float up of the product
    x = f32(a) * f32(c)
    return np.nextafter(x, f32(np.inf)) if np.isfinite(x) else x
def run_algo(L, S, NW, KT, fp8, G, D=64):
    q = rng.uniform(-4, 4, (G, D)); k = rng.uniform(-2, 2, (L, D)); v = rng.uniform(-2, 2, (L, D))
    ks, vs = (1.3, 0.7) if fp8 else (1.0, 1.0)
    scale = 1 / np.sqrt(D)
    kp = k * 2.0**-120 if fp8 else k; vp = v * 2.0**-120 if fp8 else v; qp = q * 2.0**64 if fp8 else q
    c = scale * np.log2(np.e) * ks * (2.0**56 if fp8 else 1); poff = 64 if fp8 else 0
    vfac = vs * 2.0**120 if fp8 else 1
    per = -(-L // S); per = -(-per // KT) * KT
    parts = []
    for s in range(S):
        k0 = min(L, s * per); k1 = min(L, k0 + per); nt_all = -(-(k1 - k0) // KT)
        Ms, Ls, Os = [], [], []
        for w in range(NW):
            m = np.full(G, -np.inf); l = np.zeros(G); o = np.zeros((G, D))
            for t in range(w, nt_all, NW):
                kb = k0 + t * KT
                keys = np.arange(kb, kb + KT)
                acc = np.full((KT, G), -np.inf)
                ok = keys < k1
                acc[ok] = kp[keys[ok]] @ qp.T
                mx = acc.max(0)
                mnew = np.maximum(m, [ru_mul(x, c) for x in mx])
                alpha = np.exp2(m - mnew)
                mu = mnew - poff
                p = np.exp2(acc * c - mu)
                l = l * alpha + p.sum(0); o = o * alpha[:, None] + p.T @ np.where(ok[:, None], vp[np.minimum(keys, L - 1)], 0)
                m = mnew
            Ms.append(m); Ls.append(l); Os.append(o)
        M = np.max(Ms, 0); Lsum = 0; acc = 0
        for w in range(NW):
            wt = np.where(Ms[w] == -np.inf, 0, np.exp2(Ms[w] - np.where(M == -np.inf, 0, M)))
            Lsum = Lsum + Ls[w] * wt; acc = acc + Os[w] * wt[:, None]
        val = np.where(Lsum[:, None] > 0, acc * vfac / np.where(Lsum > 0, Lsum, 1)[:, None], 0)
        lse2 = np.where(Lsum > 0, M + np.log2(np.where(Lsum > 0, Lsum, 1)) - poff, -np.inf)
        parts.append((val, lse2))
    if S == 1:
        out, lse = parts[0][0], parts[0][1] * np.log(2)
    else:
        M = np.max([p[1] for p in parts], 0)
        wts = [np.where(p[1] == -np.inf, 0, np.exp2(p[1] - M)) for p in parts]
        Ls = sum(wts); out = sum(p[0] * w[:, None] for p, w in zip(parts, wts)) / Ls[:, None]
        lse = (M + np.log2(Ls)) * np.log(2)
    logits = (q @ k.T) * scale * ks
    mref = logits.max(1); pr = np.exp(logits - mref[:, None])
    ref = pr @ (v * vs) / pr.sum(1)[:, None]; lref = mref + np.log(pr.sum(1))
    e1 = abs(out - ref).max(); e2 = abs(lse - lref).max()
    assert e1 < 1e-9 and e2 < 1e-9, (L, S, fp8, e1, e2)
    return e1, e2
for fp8 in (False, True):
    for L, S in ((1, 1), (5, 3), (37, 1), (300, 4), (1000, 1), (700, 3), (4097, 4), (33, 64)):
        for KT in (16, 32):
            run_algo(L, S, 4, KT, fp8, 4)
print("algorithm model matches softmax (bf16 and fp8 scale factors, splits, empty warps/splits)")
