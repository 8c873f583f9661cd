#!/usr/bin/env python3
"""peers.py - bench_gpu's shapes through PyTorch on the same GPU, then ONE side-by-side table
(ours / best peer / each peer) and PNG plots.

Peers (each may be "n/a: reason"; nothing here aborts the run):
  sdpa-cudnn, sdpa-flash, sdpa-efficient   torch.nn.functional.scaled_dot_product_attention under
                                           torch.nn.attention.sdpa_kernel(<one backend>)
  flex                                     torch.nn.attention.flex_attention.flex_attention, compiled
                                           (torch.compile, dynamic=False)
  torch-eager / torch-compile              merge_states as a torch expression, reshape_and_cache as
                                           index_put (tensor indexing), eager and compiled
What the peers run, and how it differs from ours:
  decode / cascade-plain   DENSE contiguous K/V [B, Hkv, ctx, D] (no block table): the peers read K/V
                           without paging; GQA through enable_gqa=True, or, where a backend refuses it,
                           K/V expanded to Hq heads beforehand (noted; the bytes counted stay the Hkv
                           bytes that must move, so such a peer pays for its expansion). No fp8 KV
                           cache in SDPA or Flex: fp8 rows are ours only.
                           Decode rows also run triton-paged (bench/triton_decode.py): a Triton
                           paged decode over a block-16 cache built from the same K/V (blocks in
                           order), split over the keys and merged, as serving engines' Triton
                           decode kernels work.
  prefill                  dense causal [nseq, H, L, D] (equal lengths, so no varlen needed).
  prefill-nc               the same without a mask, beside our prefill-paged-nc rows (non-causal).
  mixed                    two calls: the 64 decodes, then the 2048-token chunk against its 8192 keys
                           with a bottom-right causal mask (causal_lower_right / Flex mask_mod).
  verify                   a speculative-decoding verify step: dense [B, H, Lq, D] queries over
                           [B, Hkv, ctx, D] keys, bottom-right causal (the Lq draft tokens at the end).
  cascade                  the peers run the plain batch (every request's whole context, prefix
                           materialised per request); compare with our cascade and plain rows.
  FlexAttention is dense, not paged: its paged helper (experimental PagedAttention) needs a page
  as large as Flex's KV block (128), not our block 16.
Timing: CUDA events, warm-up, median of >= 20 repetitions, a 256 MB buffer zeroed before each
repetition (L2 flushed; ours rotate inputs instead). Bytes and FLOPs are counted exactly as in
bench_gpu.c; fractions are of the copy and matmul ceilings measured in THIS process (torch copy_
of 1 GiB, torch.mm bf16 8192^3). Each peer's output is compared with the first peer that ran on
the same inputs (rel L2 noted when > 2e-2).

usage: python3 bench/peers.py --ours OUT/bench_gpu.csv --out OUT [--quick] [--only LIST]
                              [--no-flex | --flex-all] [--max-gb 40] [--tables-only]
Writes OUT/peers.csv, OUT/perf_tables.md, OUT/decode_bandwidth.png, OUT/prefill_tflops.png and
prints a short summary last.
"""
import argparse
import csv
import math
import os
import sys
import time
import traceback
import warnings

PEERS_ATTN = ["sdpa-cudnn", "sdpa-flash", "sdpa-efficient", "flex"]
PEER_PAGED = "triton-paged"   # decode rows only: bench/triton_decode.py over a block-16 paged cache
PEERS_OPS = ["torch-eager", "torch-compile"]
CATS = ["decode", "prefill", "mixed", "verify", "cascade", "cache", "merge"]
KSCALE_FP8 = 0.03125

# ------------------------------------------------------------------------------------------------
# shapes (from our CSV when given, else the same grid as bench_gpu.c)


def f2i(x, default=0):
    try:
        return int(float(x))
    except (TypeError, ValueError):
        return default


def f2f(x):
    try:
        v = float(x)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def read_ours(path):
    rows = []
    if not path or not os.path.exists(path):
        return rows
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(r)
    return rows


def default_shapes(quick):
    sh = []
    tgt = {(64, 8192), (256, 1024), (1, 32768)}
    for kv in ("bf16", "fp8"):
        for hq, hkv in ((32, 8), (32, 32), (64, 8)):
            for d in (64, 128, 256):
                for b in (1, 8, 64, 256):
                    for ctx in (1024, 8192, 32768):
                        if quick and ((b, ctx) not in tgt or (hq, hkv, d) != (32, 8, 128)):
                            continue
                        sh.append(dict(category="decode", batch=b, ctx=ctx, hq=hq, hkv=hkv, d=d, kv=kv,
                                       name="decode b=%d ctx=%d h=%d/%d d=%d kv=%s" % (b, ctx, hq, hkv, d, kv)))
    for d in (64, 128, 256):
        if quick and d != 128:
            continue
        for n, L in ((1, 16384), (4, 4096), (16, 1024)):
            sh.append(dict(category="prefill", batch=n, ctx=L, hq=32, hkv=8, d=d, kv="bf16",
                           name="prefill-dense %dx%d h=32/8 d=%d" % (n, L, d)))
            if not quick or n < 16:
                sh.append(dict(category="prefill-nc", batch=n, ctx=L, hq=32, hkv=8, d=d, kv="bf16",
                               name="prefill-paged-nc %dx%d h=32/8 d=%d" % (n, L, d)))
    sh.append(dict(category="mixed", batch=64, ctx=8192, hq=32, hkv=8, d=128, kv="bf16",
                   name="mixed 64x1+1x2048 ctx=8192 h=32/8 d=128"))
    for k, (B, lq, ctx) in enumerate(((64, 8, 8192), (64, 16, 8192), (16, 64, 8192), (4, 8, 32768))):
        if not quick or k < 2:
            sh.append(dict(category="verify", batch=B, ctx=ctx, hq=32, hkv=8, d=128, kv="bf16", lq=lq,
                           name="verify %dx%d ctx=%d h=32/8 d=128" % (B, lq, ctx)))
    for P in (1024, 16384):
        for B in (64, 256):
            if quick and (P, B) != (16384, 256):
                continue
            sh.append(dict(category="cascade", batch=B, ctx=P, hq=32, hkv=8, d=128, kv="bf16",
                           name="cascade-plain P=%d b=%d own=512 h=32/8 d=128" % (P, B)))
    for T in (4096, 16384):
        if quick and T != 16384:
            continue
        for kv in ("bf16", "fp8"):
            sh.append(dict(category="cache", batch=T, ctx=0, hq=0, hkv=8, d=128, kv=kv,
                           name="cache T=%d h=8 d=128 kv=%s" % (T, kv)))
    for T in (4096, 16384):
        if quick and T != 16384:
            continue
        sh.append(dict(category="merge", batch=T, ctx=0, hq=32, hkv=0, d=128, kv="bf16",
                       name="merge T=%d h=32 d=128" % T))
    return sh


def shapes_from_ours(ours):
    sh, seen = [], set()
    catmap = {"decode": "decode", "prefill-dense": "prefill", "prefill-paged-nc": "prefill-nc", "mixed": "mixed",
              "verify": "verify",
              "cascade-plain": "cascade",
              "cache": "cache", "merge": "merge"}
    for r in ours:
        c = catmap.get(r.get("category", ""))
        # (no peer runs attention with an fp8 query: those rows are ours only)
        if c is None or r["name"] in seen or r["name"].endswith(" q=fp8"):
            continue
        seen.add(r["name"])
        sh.append(dict(category=c, batch=f2i(r["batch"]), ctx=f2i(r["ctx"]), hq=f2i(r["hq"]), hkv=f2i(r["hkv"]),
                       d=f2i(r["d"]), kv=r.get("kv", "bf16") or "bf16", name=r["name"]))
        if c == "verify":   # "verify BxLq ctx=..."
            sh[-1]["lq"] = f2i(r["name"].split()[1].split("x")[1])
    return sh


def counts(s):
    """(bytes, flops) exactly as bench_gpu.c counts them."""
    c, B, ctx, hq, hkv, D = s["category"], s["batch"], s["ctx"], s["hq"], s["hkv"], s["d"]
    es = 1 if s["kv"] == "fp8" else 2

    def attn(qlens, seqs, P=0, causal=True):
        kv_tokens, T, fl = P, 0, 0.0
        for lq, lk in zip(qlens, seqs):
            kv_tokens += lk - P
            T += lq
            fl += 4.0 * lq * (((lk - lq) + (lq + 1.0) / 2.0) if causal else lk) * hq * D
        return 2.0 * kv_tokens * hkv * D * es + 2.0 * T * hq * D * 2.0, fl

    if c == "decode":
        return attn([1] * B, [ctx] * B)
    if c == "prefill":
        return attn([ctx] * B, [ctx] * B)
    if c == "prefill-nc":
        return attn([ctx] * B, [ctx] * B, causal=False)
    if c == "mixed":
        return attn([1] * 64 + [2048], [8192] * 65)
    if c == "verify":
        return attn([s["lq"]] * B, [ctx] * B)
    if c == "cascade":
        return attn([1] * B, [ctx + 512] * B, P=ctx)
    if c == "cache":
        T, rowel = B, hkv * D
        return 2.0 * T * rowel * 2 + 8.0 * T + 2.0 * T * rowel * es, 0.0
    if c == "merge":
        tel = B * hq * D
        return 2.0 * tel * 2 + 2.0 * B * hq * 4 + tel * 2.0, 0.0
    return 0.0, 0.0


# ------------------------------------------------------------------------------------------------
# measuring


class Bench:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.args = args
        self.dev = torch.device("cuda")
        self.flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=self.dev)
        self.copy_gbs = None
        self.mm_tfs = None
        self.flex = None
        self.flex_err = None
        self.compiled = {}
        try:
            import torch._dynamo
            for k in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                      "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, k):
                    setattr(torch._dynamo.config, k, 4096)
        except Exception:
            pass

    def time_ms(self, fn, reps=30, warmup=3):
        """Median ms of fn over >= 20 repetitions, L2 flushed before each."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        est = (time.perf_counter() - t0) * 1e3
        if est > 0 and reps * est > 1500:
            reps = max(20, int(1500 / est))
        st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush.zero_()
            st[i].record()
            fn()
            en[i].record()
        torch.cuda.synchronize()
        ts = sorted(s.elapsed_time(e) for s, e in zip(st, en))
        n = len(ts)
        return ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])

    def ceilings(self):
        torch = self.torch
        try:
            n = 1 << 30
            src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=self.dev)
            dst = torch.empty_like(src)
            ms = self.time_ms(lambda: dst.copy_(src), reps=20)
            self.copy_gbs = 2.0 * n / (ms * 1e-3) / 1e9
            del src, dst
        except Exception as e:
            print("peers: copy ceiling failed: %s" % e)
        try:
            N = 8192
            a = torch.randn(N, N, device=self.dev, dtype=torch.bfloat16)
            b = torch.randn(N, N, device=self.dev, dtype=torch.bfloat16)
            ms = self.time_ms(lambda: torch.mm(a, b), reps=20, warmup=5)
            self.mm_tfs = 2.0 * N ** 3 / (ms * 1e-3) / 1e12
            del a, b
        except Exception as e:
            print("peers: matmul ceiling failed: %s" % e)
        torch.cuda.empty_cache()

    # -------------------------------------------------------------------------------- attention

    def get_flex(self):
        if self.flex is None and self.flex_err is None:
            try:
                from torch.nn.attention.flex_attention import flex_attention, create_block_mask
                self.flex = (self.torch.compile(flex_attention, dynamic=False), create_block_mask)
            except Exception as e:
                self.flex_err = "flex_attention unavailable: %s" % short(e)
        return self.flex

    def sdpa_backend(self, name):
        from torch.nn.attention import SDPBackend
        return {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION,
                "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[name]

    def run_attention_peers(self, calls, peers, kv_bytes_dense, expand_ok):
        """calls: list of (q, k, v, mask_kind, offset) with mask_kind in {None, 'causal', 'lower_right'}.
        Returns {peer: (ms or None, note, out)}."""
        torch = self.torch
        import torch.nn.functional as F
        res = {}
        for peer in peers:
            note = ""
            try:
                if peer == PEER_PAGED:
                    q, k, v, mk, off = calls[0]
                    if len(calls) != 1 or mk is not None or q.shape[2] != 1:
                        res[peer] = (None, "decode rows only", None)
                        continue
                    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                    from triton_decode import PagedDecode
                    pd = PagedDecode(torch, q, k, v, 16, torch.cuda.get_device_properties(q.device).multi_processor_count)

                    def fn(pd=pd):
                        return [pd()]
                    outs = fn()
                    torch.cuda.synchronize()
                    ms = self.time_ms(fn)
                    res[peer] = (ms, "paged block 16, blocks in order, %d splits" % pd.nsplit, outs)
                    del pd
                    continue
                if peer == "flex":
                    fx = self.get_flex()
                    if fx is None:
                        res[peer] = (None, self.flex_err, None)
                        continue
                    flex, cbm = fx
                    prepared = []
                    for q, k, v, mk, off in calls:
                        bm = None
                        Lq, Lk = q.shape[-2], k.shape[-2]
                        if mk in ("causal", "lower_right"):
                            bm = cbm(causal_mask_mod(Lk - Lq if mk == "lower_right" else 0), None, None, Lq, Lk,
                                     device=q.device)
                        prepared.append((q, k, v, bm))

                    def fn(prepared=prepared, flex=flex):
                        return [flex(q, k, v, block_mask=bm, enable_gqa=q.shape[1] != k.shape[1])
                                for q, k, v, bm in prepared]
                    outs = fn()
                    ms = self.time_ms(fn)
                    res[peer] = (ms, "dense, compiled", outs)
                    continue
                backend = self.sdpa_backend(peer)
                from torch.nn.attention import sdpa_kernel

                def make(expand):
                    prepared = []
                    for q, k, v, mk, off in calls:
                        g = q.shape[1] // k.shape[1]
                        if expand and g > 1:
                            k2, v2 = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
                        else:
                            k2, v2 = k, v
                        kw = {}
                        if mk == "causal":
                            kw["is_causal"] = True
                        elif mk == "lower_right":
                            from torch.nn.attention.bias import causal_lower_right
                            kw["attn_mask"] = causal_lower_right(q.shape[-2], k.shape[-2])
                        if not expand and g > 1:
                            kw["enable_gqa"] = True
                        prepared.append((q, k2, v2, kw))

                    def fn():
                        return [F.scaled_dot_product_attention(q, k, v, **kw) for q, k, v, kw in prepared]
                    return fn
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with sdpa_kernel([backend]):
                        fn = make(False)
                        try:
                            outs = fn()
                            torch.cuda.synchronize()
                        except Exception as e:   # RuntimeError "No available kernel", TypeError...
                            gqa = any(c[0].shape[1] != c[1].shape[1] for c in calls)
                            if not gqa:
                                raise
                            if not expand_ok:
                                raise RuntimeError("enable_gqa refused (%s); expanded K/V would exceed --max-gb"
                                                   % short(e))
                            fn = make(True)
                            outs = fn()
                            torch.cuda.synchronize()
                            note = "K/V expanded to Hq heads (enable_gqa refused)"
                        ms = self.time_ms(fn)
                res[peer] = (ms, note, outs)
            except Exception as e:
                res[peer] = (None, short(e), None)
            try:
                torch.cuda.synchronize()
            except Exception as e:   # a sticky error: later rows will say so too
                res[peer] = (None, "CUDA error: " + short(e), None)
        return res

    def make_calls(self, s):
        """[(q, k, v, mask_kind, offset)] for one shape (dense [B, H, L, D] bf16) and the K/V bytes."""
        torch = self.torch
        c, B, ctx, hq, hkv, D = s["category"], s["batch"], s["ctx"], s["hq"], s["hkv"], s["d"]

        def gen(*shape):
            return torch.randn(*shape, device=self.dev, dtype=torch.bfloat16)
        if c in ("decode", "cascade"):
            L = ctx if c == "decode" else ctx + 512
            kvb = 2.0 * B * L * hkv * D * 2
            if kvb > self.args.max_gb * 1e9:
                return None, kvb
            return [(gen(B, hq, 1, D), gen(B, hkv, L, D), gen(B, hkv, L, D), None, 0)], kvb
        if c in ("prefill", "prefill-nc"):
            kvb = 2.0 * B * ctx * hkv * D * 2
            mk = "causal" if c == "prefill" else None
            return [(gen(B, hq, ctx, D), gen(B, hkv, ctx, D), gen(B, hkv, ctx, D), mk, 0)], kvb
        if c == "verify":
            kvb = 2.0 * B * ctx * hkv * D * 2
            return [(gen(B, hq, s["lq"], D), gen(B, hkv, ctx, D), gen(B, hkv, ctx, D), "lower_right",
                     ctx - s["lq"])], kvb
        if c == "mixed":
            kvb = 2.0 * 65 * 8192 * hkv * D * 2
            return [(gen(64, hq, 1, D), gen(64, hkv, 8192, D), gen(64, hkv, 8192, D), None, 0),
                    (gen(1, hq, 2048, D), gen(1, hkv, 8192, D), gen(1, hkv, 8192, D), "lower_right", 8192 - 2048)], kvb
        return None, 0.0

    def attention_shape(self, s, peers):
        torch = self.torch
        hq, hkv = s["hq"], s["hkv"]
        calls, kvb = self.make_calls(s)
        if calls is None:
            return {p: (None, "dense K/V %.1f GB > --max-gb" % (kvb / 1e9), None) for p in peers}
        expand_ok = kvb * (hq // max(hkv, 1)) <= self.args.max_gb * 1e9
        res = self.run_attention_peers(calls, peers, kvb, expand_ok)
        cross_check(res)
        del calls
        torch.cuda.empty_cache()
        return res

    # -------------------------------------------------------------------------------- ops

    def cache_shape(self, s):
        torch = self.torch
        T, hkv, D, bs, fp8 = s["batch"], s["hkv"], s["d"], 16, s["kv"] == "fp8"
        nb = (T + bs - 1) // bs
        key = torch.randn(T, hkv, D, device=self.dev, dtype=torch.bfloat16)
        val = torch.randn(T, hkv, D, device=self.dev, dtype=torch.bfloat16)
        cdt = torch.uint8 if fp8 else torch.bfloat16   # fp8 stored through a uint8 view
        kc = torch.zeros(nb * bs, hkv, D, device=self.dev, dtype=cdt)
        vc = torch.zeros(nb * bs, hkv, D, device=self.dev, dtype=cdt)
        perm = torch.randperm(nb, device=self.dev)
        t = torch.arange(T, device=self.dev)
        slots = perm[t // bs] * bs + t % bs

        def eager():
            if fp8:
                kc[slots] = (key.float() / KSCALE_FP8).to(torch.float8_e4m3fn).view(torch.uint8)
                vc[slots] = (val.float() / KSCALE_FP8).to(torch.float8_e4m3fn).view(torch.uint8)
            else:
                kc[slots] = key
                vc[slots] = val

        res = {}
        for peer in PEERS_OPS:
            try:
                fn = eager if peer == "torch-eager" else self.torch.compile(eager, dynamic=False)
                fn()
                ms = self.time_ms(fn)
                res[peer] = (ms, "index_put (fp8 via a uint8 view)" if fp8 else "index_put", None)
            except Exception as e:
                res[peer] = (None, short(e), None)
        del key, val, kc, vc
        torch.cuda.empty_cache()
        return res

    def merge_shape(self, s):
        torch = self.torch
        T, H, D = s["batch"], s["hq"], s["d"]
        po = torch.randn(T, H, D, device=self.dev, dtype=torch.bfloat16)
        so = torch.randn(T, H, D, device=self.dev, dtype=torch.bfloat16)
        pl = torch.rand(H, T, device=self.dev) * 8 - 4
        sl = torch.rand(H, T, device=self.dev) * 8 - 4

        def merge(po, pl, so, sl):
            m = torch.maximum(pl, sl)
            pe, se = torch.exp(pl - m), torch.exp(sl - m)
            tot = pe + se
            pw = (pe / tot).t().unsqueeze(-1)
            sw = (se / tot).t().unsqueeze(-1)
            return (po.float() * pw + so.float() * sw).to(torch.bfloat16)

        res = {}
        for peer in PEERS_OPS:
            try:
                f = merge if peer == "torch-eager" else torch.compile(merge, dynamic=False)
                fn = lambda f=f: f(po, pl, so, sl)  # noqa: E731
                out = fn()
                ms = self.time_ms(fn)
                res[peer] = (ms, "", out)
            except Exception as e:
                res[peer] = (None, short(e), None)
        cross_check(res)
        del po, so, pl, sl
        torch.cuda.empty_cache()
        return res


def causal_mask_mod(offset):
    """Flex mask_mod: key j visible to query i when j <= i + offset (bottom-right causal)."""
    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset
    return mask_mod


def short(e, n=110):
    s = str(e).strip().splitlines()
    s = s[0] if s else type(e).__name__
    s = "%s: %s" % (type(e).__name__, s)
    return s if len(s) <= n else s[: n - 3] + "..."


def cross_check(res):
    """Compares each peer's outputs with the first peer that ran; notes a rel L2 > 2e-2."""
    ref = None
    for peer, (ms, note, outs) in list(res.items()):
        if outs is None:
            continue
        try:
            if ref is None:
                ref = (peer, outs)
                bad = [o for o in outs if not bool(o.float().isfinite().all())]
                if bad:
                    res[peer] = (ms, (note + "; " if note else "") + "NON-FINITE output", None)
                continue
            num = den = 0.0
            for a, b in zip(outs, ref[1]):
                a, b = a.float(), b.float()
                num += float(((a - b) ** 2).sum())
                den += float((b ** 2).sum())
            rel = math.sqrt(num / den) if den > 0 else 0.0
            if not math.isfinite(rel) or rel > 2e-2:
                res[peer] = (ms, (note + "; " if note else "") + "rel %.1e vs %s" % (rel, ref[0]), None)
        except Exception:
            pass
    for peer in list(res.keys()):
        ms, note, _ = res[peer]
        res[peer] = (ms, note, None)


# ------------------------------------------------------------------------------------------------
# tables and plots


def metric_kind(cat):
    return "tflops" if cat in ("prefill", "prefill-nc") else "frac"


def fmt_cell(us, frac, tfs, kind):
    if us is None:
        return "n/a"
    if kind == "tflops":
        return "%.0f TF/s (%.0f us)" % (tfs, us)
    return "%.3f (%.1f us)" % (frac, us)


def build_tables(ours, peer_rows, out_dir, info):
    md = []
    ours_by_name = {r["name"]: r for r in ours}
    peers_by_name = {}
    for r in peer_rows:
        peers_by_name.setdefault(r["name"], {})[r["peer"]] = r
    cop = next((r for r in ours if r["category"] == "ceiling" and "copy" in r["name"] and "end" not in r["name"]),
               None)
    gem = next((r for r in ours if r["category"] == "ceiling" and "gemm" in r["name"]), None)
    md.append("# flashattn vs peers on %s (%s)\n" % (info.get("gpu", "?"), time.strftime("%Y-%m-%d %H:%M")))
    md.append("Ceilings measured in each process: ours copy %s GB/s, GEMM %s TFLOP/s; torch copy %s GB/s, "
              "matmul %s TFLOP/s.  \n" % (
                  ("%.0f" % f2f(cop["gbps"])) if cop and f2f(cop["gbps"]) else "n/a",
                  ("%.0f" % f2f(gem["tflops"])) if gem and f2f(gem["tflops"]) else "n/a",
                  ("%.0f" % info["copy"]) if info.get("copy") else "n/a",
                  ("%.0f" % info["mm"]) if info.get("mm") else "n/a"))
    md.append("Cells: fraction of the copy ceiling (time) for memory-bound rows, TFLOP/s (time) for prefill; "
              "each side's fraction is of its own process's ceiling. Ours: paged (block 16), CUDA-graph replay, "
              "rotated inputs; peers: dense K/V, L2 flushed, see bench/peers.py. Peer notes are listed under "
              "each table.\n")
    if info.get("error"):
        md.append("\n**Peers did not run:** %s\n" % info["error"])

    def ours_vals(r):
        if r is None:
            return None, None, None
        us = f2f(r.get("time_us"))
        return us, f2f(r.get("frac_copy")), f2f(r.get("tflops"))

    def peer_vals(p):
        if p is None:
            return None, None, None
        return f2f(p.get("time_us")), f2f(p.get("frac_copy")), f2f(p.get("tflops"))

    summary_lines = []

    def section(title, names, peers, kind, label_fn=lambda n: n, extra_cols=None):
        if not names:
            return
        md.append("\n## %s\n" % title)
        hdr = ["shape", "ours"] + ([c for c, _ in extra_cols] if extra_cols else []) + ["best peer"] + peers
        md.append("| " + " | ".join(hdr) + " |")
        md.append("|" + "---|" * len(hdr))
        notes = {}
        for n in names:
            o = ours_by_name.get(n)
            ous, ofr, otf = ours_vals(o)
            cells = [label_fn(n), fmt_cell(ous, ofr, otf, kind) if o else "-"]
            if o is not None and ous is None and o.get("note"):
                cells[1] = "n/a"
                notes.setdefault("ours: " + o["note"][:90], []).append(label_fn(n))
            if o is not None and o.get("check") == "FAIL":
                cells[1] += " **CHECK FAILED**"
            if extra_cols:
                for _, fn in extra_cols:
                    cells.append(fn(n))
            pr = peers_by_name.get(n, {})
            best, bestv = None, None
            for p in peers:
                pus, pfr, ptf = peer_vals(pr.get(p))
                if pus is None:
                    continue
                v = ptf if kind == "tflops" else pfr
                if v is not None and (bestv is None or v > bestv):
                    best, bestv = p, v
            if best:
                pus, pfr, ptf = peer_vals(pr[best])
                cells.append("%s: %s" % (best, fmt_cell(pus, pfr, ptf, kind)))
            else:
                cells.append("n/a")
            for p in peers:
                r = pr.get(p)
                pus, pfr, ptf = peer_vals(r)
                cells.append(fmt_cell(pus, pfr, ptf, kind) if r else "-")
                if r is not None and r.get("note"):
                    notes.setdefault("%s: %s" % (p, r["note"]), []).append(label_fn(n))
            md.append("| " + " | ".join(cells) + " |")
            summary_lines.append((title, label_fn(n), ous, ofr, otf, best, bestv, kind))
        if notes:
            md.append("")
            for k, v in notes.items():
                md.append("- %s  (%s)" % (k, ", ".join(v[:4]) + (" ..." if len(v) > 4 else "")))

    names = lambda cat: [r["name"] for r in ours if r["category"] == cat] or \
        sorted({r["name"] for r in peer_rows if r["category"] == cat})  # noqa: E731
    dec = names("decode")
    section("Decode (q_len 1), bf16 cache: fraction of copy", [n for n in dec if n.endswith("kv=bf16")],
            PEERS_ATTN + [PEER_PAGED], "frac", lambda n: n[7:-8])
    section("Decode, fp8 e4m3 cache (ours only: no fp8 KV in SDPA/Flex)", [n for n in dec if n.endswith("kv=fp8")],
            [], "frac", lambda n: n[7:-7])
    sc = [r for r in ours if r["category"] == "split-choice"]
    if sc:
        md.append("\n## Split-KV: planner vs best fixed split (ours, 32/8 head 128 bf16)\n")
        md.append("| shape | planner vs best fixed split |")
        md.append("|---|---|")
        for r in sc:
            md.append("| %s | %s |" % (r["name"][13:], r.get("extra", "")))
    pf = [r["name"] for r in ours if r["category"] == "prefill-dense" and not r["name"].endswith(" q=fp8")] \
        or names("prefill")
    pf8 = [r["name"] for r in ours if r["category"] == "prefill-dense" and r["name"].endswith(" q=fp8")]

    def paged_col(n):
        r = ours_by_name.get(n.replace("prefill-dense", "prefill-paged"))
        d = ours_by_name.get(n)
        if not r or f2f(r.get("tflops")) is None:
            return "n/a"
        s = "%.0f TF/s (%.0f us)" % (f2f(r["tflops"]), f2f(r["time_us"]))
        if d and f2f(d.get("tflops")):
            s += ", %.2fx dense" % (f2f(r["tflops"]) / f2f(d["tflops"]))
        return s
    section("Prefill, causal, 16k tokens, 32/8 bf16: TFLOP/s (ours = dense op)", pf, PEERS_ATTN, "tflops",
            lambda n: n[14:], [("ours paged (fa_forward)", paged_col)])

    def bf16_col(n):
        r, b = ours_by_name.get(n), ours_by_name.get(n[:-len(" q=fp8")])
        if not r or not b or f2f(r.get("tflops")) is None or f2f(b.get("tflops")) is None:
            return "n/a"
        return "%.0f TF/s, fp8 %.2fx" % (f2f(b["tflops"]), f2f(r["tflops"]) / f2f(b["tflops"]))
    section("Prefill with an fp8 (E4M3) query and cache, causal, 32/8: TFLOP/s (ours only, dense op; "
            "no peer here has an fp8-query attention)", pf8, [], "tflops", lambda n: n[14:],
            [("ours bf16 (same shape)", bf16_col), ("ours paged (block table, attention op)", paged_col)])
    section("Prefill, non-causal, 32/8 bf16: TFLOP/s (ours = paged, fa_forward with FA_CAUSAL_OFF)",
            [r["name"] for r in ours if r["category"] == "prefill-paged-nc"] or names("prefill-nc"), PEERS_ATTN,
            "tflops", lambda n: n[17:])
    section("Mixed batch: 64 decodes at 8k + 2048-token chunk (6144 cached)", names("mixed"), PEERS_ATTN, "frac")
    section("Speculative-decoding verify: B sequences of Lq draft tokens over ctx keys, 32/8: fraction of copy",
            names("verify"), PEERS_ATTN, "frac")
    cp = [r["name"] for r in ours if r["category"] == "cascade-plain"] or names("cascade")

    def casc_col(n):
        r = ours_by_name.get(n.replace("cascade-plain", "cascade"))
        if not r or f2f(r.get("time_us")) is None:
            return "n/a"
        return "%.3f (%.1f us) %s" % (f2f(r["frac_copy"]) or 0, f2f(r["time_us"]), r.get("extra", ""))
    section("Cascade: ours plain vs ours cascade vs peers (plain, dense)", cp, PEERS_ATTN, "frac",
            lambda n: n[14:], [("ours cascade", casc_col)])
    section("reshape_and_cache: fraction of copy", names("cache"), PEERS_OPS, "frac")
    section("merge_states: fraction of copy", names("merge"), PEERS_OPS, "frac")

    path = os.path.join(out_dir, "perf_tables.md")
    with open(path, "w") as f:
        f.write("\n".join(md) + "\n")
    return path, summary_lines


def plots(ours, peer_rows, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print("peers: no plots (%s)" % short(e))
        return []
    files = []
    cop = next((f2f(r["gbps"]) for r in ours if r["category"] == "ceiling" and "copy" in r["name"]
                and "end" not in r["name"]), None)
    gem = next((f2f(r["tflops"]) for r in ours if r["category"] == "ceiling" and "gemm" in r["name"]), None)

    def ours_get(name, key):
        for r in ours:
            if r["name"] == name:
                return f2f(r.get(key))
        return None

    def peer_get(name, peer, key):
        for r in peer_rows:
            if r["name"] == name and r["peer"] == peer:
                return f2f(r.get(key))
        return None

    ctxs = [1024, 8192, 32768]
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharey=True)
    for ax, B in zip(axes.flat, [1, 8, 64, 256]):
        for label, kv, style in (("ours bf16", "bf16", "o-"), ("ours fp8", "fp8", "s-")):
            ys = [ours_get("decode b=%d ctx=%d h=32/8 d=128 kv=%s" % (B, c, kv), "gbps") for c in ctxs]
            xs = [c for c, y in zip(ctxs, ys) if y]
            if xs:
                ax.plot(xs, [y for y in ys if y], style, label=label, linewidth=2)
        for p in PEERS_ATTN:
            ys = [peer_get("decode b=%d ctx=%d h=32/8 d=128 kv=bf16" % (B, c), p, "gbps") for c in ctxs]
            xs = [c for c, y in zip(ctxs, ys) if y]
            if xs:
                ax.plot(xs, [y for y in ys if y], "x--", label=p + " (dense)")
        if cop:
            ax.axhline(cop, color="k", linestyle=":", label="copy ceiling")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ctxs)
        ax.set_xticklabels(["1k", "8k", "32k"])
        ax.set_ylim(bottom=0)
        ax.set_title("decode batch %d (32/8 heads, d=128)" % B)
        ax.set_xlabel("context")
        ax.set_ylabel("GB/s of bytes that must move")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    p1 = os.path.join(out_dir, "decode_bandwidth.png")
    fig.savefig(p1, dpi=110)
    plt.close(fig)
    files.append(p1)

    shapes = [(16, 1024), (4, 4096), (1, 16384)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 5), sharey=True)
    for ax, D in zip(axes, [64, 128, 256]):
        xs = [L for _, L in shapes]
        for label, cat, style in (("ours dense", "prefill-dense", "o-"), ("ours paged", "prefill-paged", "s-")):
            ys = [ours_get("%s %dx%d h=32/8 d=%d" % (cat, n, L, D), "tflops") for n, L in shapes]
            if any(ys):
                ax.plot([x for x, y in zip(xs, ys) if y], [y for y in ys if y], style, label=label, linewidth=2)
        for p in PEERS_ATTN:
            ys = [peer_get("prefill-dense %dx%d h=32/8 d=%d" % (n, L, D), p, "tflops") for n, L in shapes]
            if any(ys):
                ax.plot([x for x, y in zip(xs, ys) if y], [y for y in ys if y], "x--", label=p)
        if gem:
            ax.axhline(gem, color="k", linestyle=":", label="GEMM ceiling")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels(["16x1k", "4x4k", "1x16k"])
        ax.set_ylim(bottom=0)
        ax.set_title("prefill causal, 16k tokens, d=%d" % D)
        ax.set_xlabel("sequence length (batch x L)")
        ax.set_ylabel("TFLOP/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    p2 = os.path.join(out_dir, "prefill_tflops.png")
    fig.savefig(p2, dpi=110)
    plt.close(fig)
    files.append(p2)
    return files


def print_summary(ours, peer_rows):
    """The short table printed last: the targets' rows, ours against the best peer."""
    rows = [("decode b=64 ctx=8k", "decode b=64 ctx=8192 h=32/8 d=128 kv=bf16", "frac", 0.92),
            ("decode b=256 ctx=1k", "decode b=256 ctx=1024 h=32/8 d=128 kv=bf16", "frac", 0.88),
            ("decode b=1 ctx=32k", "decode b=1 ctx=32768 h=32/8 d=128 kv=bf16", "frac", 0.80),
            ("decode fp8 b=64 ctx=8k", "decode b=64 ctx=8192 h=32/8 d=128 kv=fp8", "frac", 0.92),
            ("prefill 1x16384 d=128", "prefill-dense 1x16384 h=32/8 d=128", "tflops", 300),
            ("prefill 4x4096 d=128", "prefill-dense 4x4096 h=32/8 d=128", "tflops", 300),
            ("prefill paged 1x16384 d=128", "prefill-paged 1x16384 h=32/8 d=128", "tflops", 0),
            ("mixed 64 dec + 2048 chunk", "mixed 64x1+1x2048 ctx=8192 h=32/8 d=128", "frac", 0),
            ("cascade 256 x 16k (peers: plain)", "cascade P=16384 b=256 own=512 h=32/8 d=128", "us", 0),
            ("cache 16k bf16", "cache T=16384 h=8 d=128 kv=bf16", "frac", 0.90),
            ("cache 16k fp8", "cache T=16384 h=8 d=128 kv=fp8", "frac", 0.90),
            ("merge 16k x 32 heads", "merge T=16384 h=32 d=128", "frac", 0.90)]
    ob = {r["name"]: r for r in ours}
    print("\n%-36s %24s %8s %34s" % ("ours vs best peer (same GPU)", "ours", "target", "best peer"))
    for label, name, kind, target in rows:
        o = ob.get(name)
        pname = name.replace("cascade P", "cascade-plain P")
        if o is None and not any(r["name"] == pname for r in peer_rows):
            continue
        key = {"tflops": "tflops", "frac": "frac_copy", "us": "time_us"}[kind]
        ov = f2f(o.get(key)) if o else None
        ous = f2f(o.get("time_us")) if o else None
        best, bv = None, None
        for r in peer_rows:
            if r["name"] != pname:
                continue
            v = f2f(r.get(key))
            if v is not None and (bv is None or (v < bv if kind == "us" else v > bv)):
                best, bv = r["peer"], v
        unit = {"tflops": " TF/s", "frac": " of copy", "us": " us"}[kind]
        fmt = "%.3f" if kind == "frac" else "%.0f"
        os_ = (fmt % ov + unit + (" (%.0f us)" % ous if kind != "us" else "")) if ov is not None and ous else "n/a"
        if kind == "us" and ous:
            plain = ob.get(pname)
            if plain and f2f(plain.get("time_us")):
                os_ += " (plain %.0f)" % f2f(plain["time_us"])
        if o is not None and o.get("check") == "FAIL":
            os_ += " CHECK FAILED"
        ts = (fmt % target) if target else "-"
        bs = ("%s " % best + fmt % bv + unit) if best else "n/a"
        print("%-36s %24s %8s %34s" % (label, os_, ts, bs))


# ------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", default=None, help="bench_gpu CSV (its rows choose the shapes)")
    ap.add_argument("--out", required=True, help="folder for peers.csv, perf_tables.md, PNGs")
    ap.add_argument("--quick", action="store_true", help="the targets' shapes only")
    ap.add_argument("--only", default=None, help="categories: decode,prefill,mixed,cascade,cache,merge")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (no compiles)")
    ap.add_argument("--flex-all", action="store_true",
                    help="compile Flex for every decode/cascade row (default: 32/8 d=128 target rows only)")
    ap.add_argument("--max-gb", type=float, default=40.0, help="skip peer rows whose dense K/V exceeds this")
    ap.add_argument("--tables-only", action="store_true", help="re-render tables/plots from OUT/peers.csv")
    ap.add_argument("--ours-only", action="store_true", help="measure no peer: tables and plots of ours only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ours = read_ours(args.ours)
    peers_csv = os.path.join(args.out, "peers.csv")
    info = {}
    peer_rows = []
    fields = ["category", "name", "peer", "batch", "ctx", "hq", "hkv", "d", "kv", "time_us", "bytes", "flops",
              "gbps", "tflops", "frac_copy", "frac_gemm", "note"]

    if args.ours_only:
        info["error"] = "not measured (--ours-only / run_perf.sh --no-peers)"
    elif args.tables_only:
        if os.path.exists(peers_csv):
            with open(peers_csv, newline="") as f:
                peer_rows = list(csv.DictReader(f))
    else:
        shapes = shapes_from_ours(ours) if ours else default_shapes(args.quick)
        if args.quick and ours:
            pass  # our CSV already reflects --quick
        if args.only:
            want = set(args.only.split(","))
            if "prefill" in want:
                want.add("prefill-nc")  # bench_gpu's prefill category holds the non-causal rows too
            shapes = [s for s in shapes if s["category"] in want]
        t0 = time.time()
        try:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            info["gpu"] = torch.cuda.get_device_name()
            info["torch"] = torch.__version__
            bench = Bench(args)
            bench.ceilings()
            info["copy"], info["mm"] = bench.copy_gbs, bench.mm_tfs
            print("peers: torch %s on %s; copy %s GB/s, matmul %s TFLOP/s; %d shapes" % (
                torch.__version__, info["gpu"], "%.0f" % bench.copy_gbs if bench.copy_gbs else "n/a",
                "%.0f" % bench.mm_tfs if bench.mm_tfs else "n/a", len(shapes)))
        except Exception as e:
            bench = None
            info["error"] = short(e, 300)
            print("peers: PyTorch unavailable (%s): tables hold ours only" % info["error"])
        f = open(peers_csv, "w", newline="")
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        flex_targets = {(64, 8192), (256, 1024), (1, 32768)}
        for s in shapes:
            if bench is None:
                break
            by, fl = counts(s)
            c = s["category"]
            try:
                if c in ("decode", "prefill", "prefill-nc", "mixed", "verify", "cascade"):
                    if s["kv"] == "fp8":
                        res = {p: (None, "no fp8 KV-cache attention in SDPA/Flex", None) for p in PEERS_ATTN}
                    else:
                        peers = list(PEERS_ATTN)
                        flex_note = None
                        if args.no_flex:
                            flex_note = "--no-flex"
                        elif c in ("decode", "cascade") and not args.flex_all and not (
                                (s["batch"], s["ctx"]) in flex_targets and (s["hq"], s["hkv"], s["d"]) == (32, 8, 128)):
                            flex_note = "not compiled for this row (--flex-all compiles every row)"
                        if flex_note:
                            peers.remove("flex")
                        if c == "decode":
                            peers.append(PEER_PAGED)
                        res = bench.attention_shape(s, peers)
                        if flex_note:
                            res["flex"] = (None, flex_note, None)
                elif c == "cache":
                    res = bench.cache_shape(s)
                elif c == "merge":
                    res = bench.merge_shape(s)
                else:
                    continue
            except Exception as e:
                res = {p: (None, short(e), None) for p in (PEERS_OPS if c in ("cache", "merge") else PEERS_ATTN)}
                try:
                    import torch
                    torch.cuda.empty_cache()
                except Exception:
                    pass
            for peer, (ms, note, _) in res.items():
                r = dict(category=c, name=s["name"], peer=peer, batch=s["batch"], ctx=s["ctx"], hq=s["hq"],
                         hkv=s["hkv"], d=s["d"], kv=s["kv"], bytes="%.6g" % by, flops="%.6g" % fl, note=note or "")
                if ms is not None and ms > 0:
                    us = ms * 1e3
                    gbs = by / (ms * 1e-3) / 1e9
                    tfs = fl / (ms * 1e-3) / 1e12
                    r.update(time_us="%.3f" % us, gbps="%.3f" % gbs, tflops="%.4f" % tfs,
                             frac_copy="%.4f" % (gbs / bench.copy_gbs) if bench.copy_gbs else "",
                             frac_gemm="%.4f" % (tfs / bench.mm_tfs) if bench.mm_tfs and fl > 0 else "")
                else:
                    r.update(time_us="", gbps="", tflops="", frac_copy="", frac_gemm="",
                             note="n/a: " + (note or "failed"))
                w.writerow(r)
                peer_rows.append({k: str(v) for k, v in r.items()})
            f.flush()
            best = [(p, v[0]) for p, v in res.items() if v[0]]
            print("peers: %-52s %s" % (s["name"][:52], ", ".join("%s %.1f us" % (p, ms * 1e3) for p, ms in best)
                                        if best else "all n/a"))
            sys.stdout.flush()
        f.close()
        print("peers: measured in %.0f s" % (time.time() - t0))

    if "gpu" not in info:
        info["gpu"] = "?"
    path, _ = build_tables(ours, peer_rows, args.out, info)
    pngs = plots(ours, peer_rows, args.out)
    wrote = ([peers_csv] if not args.ours_only and not args.tables_only else []) + [path] + pngs
    print("peers: wrote %s" % ", ".join(wrote))
    print_summary(ours, peer_rows)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(1)
