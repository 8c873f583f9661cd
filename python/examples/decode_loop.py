"""A decode loop through the flashattn binding: a small attention-only model with random
weights (2 layers, 8 query heads, 2 KV heads, head size 64) serves 3 requests of different
prompt lengths: one prefill step, then decode steps, with a paged KV cache, a block allocator
and one builder shared by the layers (pre-norm layers; each request's last hidden state,
RMS-normalised, is its next input). At the end
the same model is run densely over each whole sequence (plain causal attention, no cache) and
the last hidden states are compared.

    FLASHATTN_LIB_DIR=build/packaging PYTHONPATH=python python3 python/examples/decode_loop.py
    ... --device cuda        # the CUDA backend on torch tensors (bf16), when available

The CPU backend runs on NumPy float32 arrays; the CUDA backend on torch bf16 tensors.
"""
import argparse
import math
import time

import numpy as np

import flashattn as fa

HIDDEN, HQ, HKV, D, LAYERS, BLOCK = 256, 8, 2, 64, 2, 16


class Numpy:
    """Array operations for the CPU backend (NumPy, float32)."""
    dtype = fa.DType.F32

    def __init__(self):
        self.backend = fa.Backend.cpu()
        self.rng = np.random.default_rng(0)

    def randn(self, *shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def zeros(self, *shape):
        return np.zeros(shape, np.float32)

    def ints(self, values, bits):
        return np.asarray(values, np.int32 if bits == 32 else np.int64)

    def cat(self, xs):
        return np.concatenate(xs)

    def rms_norm(self, x):
        return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)).astype(np.float32)

    def host(self, x):
        return np.asarray(x, np.float64)

    def sync(self):
        pass


class Torch:
    """Array operations for the CUDA backend (torch, bf16 activations)."""
    dtype = fa.DType.BF16

    def __init__(self):
        import torch
        self.torch = torch
        self.backend = fa.Backend.cuda(0, torch.cuda.current_stream())
        self.gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(self, *shape, scale=1.0):
        t = self.torch
        return (t.randn(*shape, generator=self.gen, device="cuda") * scale).to(t.bfloat16)

    def zeros(self, *shape):
        return self.torch.zeros(*shape, device="cuda", dtype=self.torch.bfloat16)

    def ints(self, values, bits):
        t = self.torch
        return t.tensor(list(values), dtype=t.int32 if bits == 32 else t.int64, device="cuda")

    def cat(self, xs):
        return self.torch.cat(xs)

    def rms_norm(self, x):
        xf = x.float()
        return (xf * self.torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)

    def host(self, x):
        return x.float().cpu().numpy().astype(np.float64)

    def sync(self):
        self.torch.cuda.synchronize()


class AttentionLayer:
    """x [T, HIDDEN] -> RMS norm -> fused QKV projection -> flashattn (paged, causal) -> output
    projection, with a residual connection."""

    def __init__(self, xp, builder, num_blocks):
        self.xp = xp
        self.w_qkv = xp.randn(HIDDEN, (HQ + 2 * HKV) * D, scale=1 / math.sqrt(HIDDEN))
        self.w_o = xp.randn(HQ * D, HIDDEN, scale=1 / math.sqrt(HQ * D))
        self.fa_layer = builder.layer()  # the model's heads, head size and dtype, from the config
        self.kv_cache = xp.zeros(*fa.kv_cache_shape(num_blocks, BLOCK, HKV, D))

    def qkv(self, x):
        t = x.shape[0]
        fused = self.xp.rms_norm(x) @ self.w_qkv
        q = fused[:, :HQ * D].reshape(t, HQ, D)          # strided views of the fused projection
        k = fused[:, HQ * D:(HQ + HKV) * D].reshape(t, HKV, D)
        v = fused[:, (HQ + HKV) * D:].reshape(t, HKV, D)
        return q, k, v

    def __call__(self, x, md):
        q, k, v = self.qkv(x)
        out = self.xp.zeros(x.shape[0], HQ, D)
        fa.forward(self.fa_layer, self.xp.backend, q, k, v, self.kv_cache, md, out)
        return x + out.reshape(x.shape[0], HQ * D) @ self.w_o


class BlockAllocator:
    def __init__(self, num_blocks):
        self.free = list(range(num_blocks))[::-1]

    def grow(self, table, tokens):
        while len(table) * BLOCK < tokens:
            table.append(self.free.pop())


def rms_norm64(x):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def dense_reference(layers, xs):
    """The model over one whole sequence xs [L, HIDDEN] with dense causal attention, float64."""
    x = xs
    for layer in layers:
        w_qkv, w_o = layer.xp.host(layer.w_qkv), layer.xp.host(layer.w_o)
        fused = rms_norm64(x) @ w_qkv
        n = x.shape[0]
        q = fused[:, :HQ * D].reshape(n, HQ, D)
        k = fused[:, HQ * D:(HQ + HKV) * D].reshape(n, HKV, D)
        v = fused[:, (HQ + HKV) * D:].reshape(n, HKV, D)
        out = np.zeros((n, HQ, D))
        mask = np.tril(np.ones((n, n), bool))
        for h in range(HQ):
            s = q[:, h] @ k[:, h // (HQ // HKV)].T / math.sqrt(D)
            s = np.where(mask, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ v[:, h // (HQ // HKV)]
        x = x + out.reshape(n, HQ * D) @ w_o
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--steps", type=int, default=24, help="decode steps after the prefill")
    args = ap.parse_args()
    use_cuda = args.device == "cuda"
    if args.device == "auto":
        try:
            import torch
            use_cuda = torch.cuda.is_available() and fa.have_cuda()
        except ImportError:
            use_cuda = False
    xp = Torch() if use_cuda else Numpy()
    prompts = [37, 5, 64]
    num_blocks = sum(-(-(p + args.steps) // BLOCK) for p in prompts) + 4
    cfg = fa.config(num_heads_q=HQ, num_heads_kv=HKV, head_size=D, dtype=xp.dtype,
                    block_size=BLOCK, max_num_seqs=8, max_num_batched_tokens=256)
    builder = fa.Builder(xp.backend, cfg)
    layers = [AttentionLayer(xp, builder, num_blocks) for _ in range(LAYERS)]
    builder.set_layers([l.fa_layer for l in layers])
    alloc = BlockAllocator(num_blocks)
    tables = [[] for _ in prompts]
    lens = [0] * len(prompts)
    inputs = [[] for _ in prompts]  # every input row of each request, for the check at the end
    x_new = [xp.randn(p, HIDDEN) for p in prompts]
    t0 = time.time()
    for step in range(args.steps + 1):
        qlens = [x.shape[0] for x in x_new]
        slots, qsl = [], [0]
        for r, n in enumerate(qlens):
            alloc.grow(tables[r], lens[r] + n)
            for p in range(lens[r], lens[r] + n):
                slots.append(tables[r][p // BLOCK] * BLOCK + p % BLOCK)
            lens[r] += n
            qsl.append(qsl[-1] + n)
            inputs[r].append(xp.host(x_new[r]))
        width = max(len(t) for t in tables)
        bt = [t + [t[0]] * (width - len(t)) for t in tables]
        md = builder.build(query_start_loc=qsl, seq_lens=lens,
                           block_table=xp.ints([c for row in bt for c in row], 32).reshape(
                               len(bt), width),
                           slot_mapping=xp.ints(slots, 64))
        if step == 0:
            print("prefill plan:", md.describe())
        h = xp.cat(x_new)
        for layer in layers:
            h = layer(h, md)
        # the next input of each request: its last hidden state, normalised
        x_new = [xp.rms_norm(h[qsl[r + 1] - 1:qsl[r + 1]]) for r in range(len(prompts))]
        last = [h[qsl[r + 1] - 1] for r in range(len(prompts))]
    xp.sync()
    dt = time.time() - t0
    print("decode plan:", md.describe())
    print("%s backend: %d requests, prefill %s + %d decode steps in %.3f s"
          % (xp.backend.name, len(prompts), prompts, args.steps, dt))
    worst = 0.0
    for r in range(len(prompts)):
        ref = dense_reference(layers, np.concatenate(inputs[r]))[-1]
        got = xp.host(last[r])
        err = float(np.abs(got - ref).max() / max(1.0, np.abs(ref).max()))
        worst = max(worst, err) if np.isfinite(err) else float("inf")
        print("request %d: %d tokens, last hidden state vs dense recomputation: max rel error %.2e"
              % (r, lens[r], err))
    tol = 1e-4 if xp.dtype == fa.DType.F32 else 5e-2
    print("OK" if worst <= tol else "MISMATCH (tolerance %g)" % tol)
    builder.close()
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    raise SystemExit(main())
