#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets: tests/fuzz/corpus/<target>/seed_*.

The inputs are spelled with the encoders below, which mirror the readers of fuzz_common.h
(fz_u8, fz_bool, fz_range, fz_i32, fz_i64, fz_small_or_any, fz_float), so each seed is a
readable list of the arguments it decodes to. Files named finding_* (reproducers of fixed
findings) are kept as they are. Run: python3 tests/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

def u8(v): return bytes([v & 0xFF])
def boolean(v): return u8(1 if v else 0)
def rng(v, lo):  # fz_range(lo, hi) reading (v - lo) as two little-endian bytes
    return struct.pack('<H', (v - lo) & 0xFFFF)
def i32(v):  # fz_i32
    specials = {0: 0, 1: 1, -1: 2, 2**31 - 1: 3, -2**31: 4}
    if v in specials: return u8(specials[v])
    if 0 <= v <= 255: return u8(13) + u8(v)
    return u8(7) + struct.pack('<i', v)
def i64(v):  # fz_i64
    specials = {0: 0, 1: 1, -1: 2, 2**63 - 1: 3, -2**63: 4, 2**31 - 1: 5, 2**31: 6}
    if v in specials: return u8(specials[v])
    return u8(9) + struct.pack('<q', v)
def soa(v, lo):  # fz_small_or_any(lo, hi) with v in [lo, hi]
    return u8(1) + rng(v, lo)
def soa_any(v):  # fz_small_or_any taking the fz_i32 branch
    return u8(0) + i32(v)
def flt(v):  # fz_float, v = k / 32 for k in [0, 255]
    return u8(7) + u8(int(v * 32))

MAX32, MIN32 = 2**31 - 1, -2**31

SEEDS = {
    'fuzz_cascade': [
        # fa_use_cascade_attention: 16 decodes, P 1024, Hq 32, Hkv 8, 132 SMs
        u8(0) + rng(16, 0) + i32(1024) + boolean(1) + i32(32) + i32(8) + i32(132) + i32(1) + b'\0' * 4 + b'\1' * 16,
        u8(0) + rng(8, 0) + i32(MAX32) + boolean(1) + i32(MAX32) + i32(1) + i32(1) + i32(1) + b'\0' * 4,
        # fa_cascade_prefix_len: 8 requests, 64 blocks of 16, long contexts
        u8(1) + rng(8, 0) + b'\0\0' + soa(64, 0) + boolean(1) + rng(1, 1) + boolean(1) + soa(32, 1) + soa(8, 1)
        + soa(132, 0) + soa(1, 0) + b'\0' * 4 + (soa(2048, 0) + b'\1') * 8,
        u8(1) + rng(4, 0) + b'\0\0' + soa_any(MAX32) + boolean(0) + i32(MAX32) + boolean(0) + i32(-1),
        # fa_cascade_block_tables
        u8(2) + i64(8) + i32(64) + boolean(1) + rng(1, 1) + u8(0) + boolean(0),
        u8(2) + i64(-1) + i32(MIN32) + boolean(0) + i32(0) + u8(2),
    ],
    'fuzz_local': [
        # 2 requests, block 16, chunk 32, stride 4
        rng(2, 0) + boolean(1) + boolean(1) + rng(1, 1) + boolean(1) + rng(2, 1) + rng(4, 1) + boolean(1)
        + boolean(1) + rng(4, 1) + u8(0) + u8(0)
        + boolean(1) + rng(5, 0) + u8(0) + boolean(1) + rng(30, 0)
        + boolean(1) + rng(1, 0) + u8(0) + boolean(1) + rng(70, 0)
        + rng(16, 0) + boolean(1) + u8(0),
        rng(1, 0) + boolean(1) + boolean(0) + soa_any(1) + boolean(0) + soa(60, 1) + rng(8, 1) + boolean(1)
        + boolean(1) + rng(8, 1) + u8(0) + u8(0) + boolean(0) + i32(23) + u8(0) + boolean(0) + i32(MAX32),
    ],
    'fuzz_dcp': [
        u8(0) + i32(37) + soa(4, 1) + soa(2, 0) + soa(16, 1),
        u8(0) + i32(MAX32) + soa_any(MAX32) + soa_any(MAX32 - 1) + soa_any(MAX32),
        u8(1) + rng(4, 0) + u8(0) + boolean(1) + soa(2, 1) + soa(1, 0) + soa(1, 1) + soa(100, 0) * 4,
        u8(2) + rng(2, 1) + rng(4, 1) + rng(8, 0) + u8(0) + boolean(1) + boolean(1) + rng(4, 1) + boolean(1) + rng(1, 1)
        + soa(2, 1) + soa(1, 0) + boolean(1) + rng(2, 0) + boolean(1),
    ],
    'fuzz_splits': [
        # fa_plan_splits: 4 decodes, Hkv 8, G 4, head 128, CPU caps
        u8(1) + rng(4, 0) + u8(0) + boolean(1) + soa(8, 1) + boolean(1) + rng(4, 1) + boolean(1) + rng(16, 1)
        + boolean(1) + boolean(1) + boolean(1) + soa(132, 1) + soa(32, 1) + u8(0) + soa(2, 0) + u8(1) + u8(0)
        + boolean(1) + (u8(1) + rng(1, 0) + u8(0) + soa(8192, 0)) * 4 + rng(5, 0) + boolean(1),
        # a prefill
        u8(1) + rng(1, 0) + u8(0) + boolean(1) + soa(2, 1) + boolean(1) + rng(1, 1) + boolean(1) + rng(8, 1)
        + boolean(1) + boolean(1) + boolean(1) + soa(132, 1) + soa(128, 1) + u8(0) + soa(0, 0) + u8(1) + u8(0)
        + boolean(1) + u8(0) + soa(500, 0) + u8(0) + soa(600, 0) + rng(2, 0) + boolean(1),
        u8(0) + i64(2) + soa(132, 1) + soa(100, 0) + soa(32, 0),
        u8(0) + i64(-2**63) + soa_any(MAX32) + soa_any(MAX32) + soa_any(MAX32),
    ],
    'fuzz_window': [
        u8(0) + i32(4096) + boolean(1) + rng(2, 0),
        u8(0) + i32(MIN32) + boolean(0) + i32(MAX32),
        u8(1) + rng(3, 0) + u8(0) + boolean(1) + i32(127) + i32(0) + u8(1) + u8(1),
        u8(1) + rng(2, 0) + u8(0) + boolean(1) + i32(-1) + i32(-1) + u8(0) + i32(5) + i32(0),
    ],
    'fuzz_caps': [
        i32(128) + boolean(1) + rng(0, -1) + boolean(1) + rng(0, -1) + i32(16) + i32(0) + i32(0) + boolean(1) + rng(9, 0)
        + boolean(1) + rng(0, 0) + i32(0),
        i32(MAX32) + boolean(0) + i32(MIN32) + boolean(0) + i32(-1) + i32(MIN32) + i32(1) + i32(1) + boolean(0)
        + i32(MAX32) + boolean(0) + i32(MAX32) + i32(99),
    ],
    'fuzz_kvcache': [
        u8(0) + i64(1024) + i32(16) + i32(8) + i32(128) + u8(0),
        u8(0) + i64(2**63 - 1) + i32(2**30) + i32(MAX32) + i32(256) + u8(0),
        u8(1) + boolean(1) + rng(1, -1) + i32(1) + u8(0),
        u8(2) + boolean(1) + rng(1, -1) + boolean(1) + rng(64, 1) + boolean(1) + rng(2, 1) + soa(8, 1)
        + boolean(1) + rng(16, 1) + u8(0),
        u8(3) + boolean(1) + rng(3, -1) + i32(2) + u8(0) + b'\0' * 8 + (boolean(1) + rng(7, 0)) * 6,
        u8(3) + boolean(1) + rng(6, -1) + i32(2) + u8(0) + b'\0' * 8 + (boolean(0) + i64(2**40)) * 6,
    ],
    'fuzz_config': [
        b'\0' * 20,  # every field 0 (defaults): head_size 0 is refused
        u8(2) + rng(32, 1) + u8(2) + rng(8, 1) + boolean(1) + rng(16, 1) + b'\0' * 16,
        u8(1) + i32(MAX32) + u8(1) + i32(1) + boolean(0) + u8(2) + rng(256, 0) + u8(0) * 3 + u8(2) + rng(2, 1)
        + u8(2) + rng(1, 0) + b'\0' * 6 + u8(1) + i32(MAX32) + u8(1) + i32(MAX32),
    ],
    'fuzz_builder': [
        # Hkv 2, Hq 4, head 64, bf16, block 16, 8 seqs, 64 tokens; one step of 2 requests (q 1 and 5)
        soa(2, 1) + rng(2, 1) + boolean(1) + rng(8, 1) + soa(0, 0) + boolean(1) + rng(1, 0) + soa(0, 0)
        + u8(1) + soa(0, 0) + boolean(1) + boolean(0) + soa(0, 0) + soa(0, 0) + u8(0) + soa(0, 0)
        + soa(8, 1) + soa(64, 1) + boolean(1) + u8(0) + boolean(1) + boolean(1) + u8(0) + u8(0)
        + rng(2, 1) + boolean(1) + u8(0)
        + u8(1) + rng(1, 0) + u8(0) + soa(20, 0) + u8(0) + soa(5, 0) + u8(0) + soa(40, 0)
        + rng(4, 1) + u8(0) * 4 + boolean(1) + boolean(1) + soa(1, 0) + boolean(1) + boolean(1)
        + soa(0, 0) + u8(0) + u8(0),
        # the same with chunked local attention (chunk 32) and a cascade request of 2 blocks
        soa(2, 1) + rng(2, 1) + boolean(1) + rng(8, 1) + soa(0, 0) + boolean(1) + rng(1, 0) + soa(0, 0)
        + u8(1) + soa(0, 0) + boolean(1) + boolean(0) + soa(0, 0) + soa(0, 0) + u8(0) + soa(0, 0)
        + soa(8, 1) + soa(64, 1) + boolean(0) + soa(32, 0) + u8(0) + boolean(1) + boolean(1) + u8(0) + u8(0)
        + rng(2, 1) + boolean(1) + u8(0)
        + u8(1) + rng(1, 0) + u8(0) + soa(40, 0) + u8(0) + soa(5, 0) + u8(0) + soa(50, 0)
        + rng(8, 1) + u8(0) * 4 + boolean(1) + boolean(1) + soa(1, 0) + boolean(1) + boolean(1)
        + soa(2, 0) + u8(0) + u8(0),
    ],
    'fuzz_forward': [
        struct.pack('<I', 12345) + rng(2, 1) + rng(2, 1) + rng(2, 1) + rng(0, 0) + rng(1, 1) + rng(4, 1)
        + rng(0, 0) + rng(2, 0) + u8(0) + u8(0) + boolean(1) + u8(0)
        + u8(1) + boolean(1) + boolean(1) + boolean(1) + b'\x40\x40' * 8 + u8(0) + u8(0) + boolean(1)
        + boolean(1) + boolean(1) + u8(0) + boolean(1) + u8(0)
        + rng(2, 1) + u8(1) + rng(10, 0) + u8(1) + rng(30, 0) + u8(0) + rng(5, 0) + rng(40, 0),
        struct.pack('<I', 7) + b'\x01\x00' * 6 + b'\x00' * 64,
    ],
}

SEEDS['fuzz_forward_dcp'] = [
    # seed, N 2, Hkv 1, G 2, head 16, f32, interleave 1, nobody bad; 2 requests
    struct.pack('<I', 99) + rng(2, 2) + rng(1, 1) + rng(2, 1) + rng(2, 1) + rng(2, 0) + rng(0, 0) + rng(4, 0)
    + rng(0, 0) + boolean(1) + boolean(1) + rng(2, 1) + u8(1) + rng(40, 0) + u8(0) + rng(3, 0) + rng(70, 0)
    + b'\0\0' * 8,
    # N 3, interleave 4, rank 1 fails its checks (out dtype)
    struct.pack('<I', 5) + rng(3, 2) + rng(2, 1) + rng(1, 1) + rng(1, 1) + rng(1, 0) + rng(2, 0) + rng(1, 0)
    + rng(1, 0) + boolean(1) + boolean(1) + rng(1, 1) + u8(1) + rng(100, 0),
]

def main():
    for target, seeds in SEEDS.items():
        d = os.path.join(HERE, 'corpus', target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.startswith('seed_'):
                os.remove(os.path.join(d, name))
        for i, data in enumerate(seeds):
            with open(os.path.join(d, 'seed_%02d' % i), 'wb') as f:
                f.write(data)
        with open(os.path.join(d, 'seed_empty'), 'wb') as f:
            pass
    print('corpus: %d targets, %d seeds' % (len(SEEDS), sum(len(s) + 1 for s in SEEDS.values())))

if __name__ == '__main__':
    main()
