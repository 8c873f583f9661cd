#!/usr/bin/env python3
"""Copies the HIP headers of Debian's libamdhip64-dev (ROCm 5.2) into DEST/hip and makes their
NVIDIA platform part (hip/nvidia_detail) compile with the nvcc at hand.

HIP 5.2's NVIDIA headers wrap CUDA runtime functions that CUDA 12 and 13 removed or changed
(texture references, cudaDeviceProp.clockRate, cudaMemPrefetchAsync's device argument, graph
edge data, cuCtxCreate, ...). None of them is used by flashattn. This script compiles a probe
with nvcc, and for every error line in a header it

  - deletes a function whose signature names `texture<...>` (texture references are gone),
  - replaces a `return ...;` statement with `return hipErrorNotSupported;`,
  - replaces a statement in a `case` of a switch with `return hipErrorNotSupported;`,
  - deletes any other statement (struct field copies of removed cudaDeviceProp fields),

then compiles again, until the probe builds (at most 8 rounds). The result goes into an ignored
folder (build-hip-nvidia/hip-headers by default, under .gitignore's /build*/); run_hip_on_nvidia.sh
runs this on the GPU machine itself, from the copy of the package's headers it carries
(hip-debian-headers/hip). It is a patch of the package's files applied at build time, recorded
in DEST/PATCHES.txt, not code of this project.

usage: prepare_hip_nvidia_headers.py [DEST] [--src /usr/include/hip] [--nvcc nvcc]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROBE = r'''
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
__global__ void probe_kernel(float *x) { x[threadIdx.x] += 1.0f; }
int main() {
    float *p = nullptr;
    void *h = nullptr, *d = nullptr;
    (void)hipMalloc(&p, 256);
    hipLaunchKernelGGL(probe_kernel, dim3(1), dim3(32), 0, 0, p);
    (void)hipHostMalloc(&h, 64, hipHostMallocMapped | hipHostMallocPortable);
    (void)hipHostGetDevicePointer(&d, h, 0);
    hipDeviceProp_t pr;
    (void)hipGetDeviceProperties(&pr, 0);
    int v = 0;
    (void)hipDeviceGetAttribute(&v, hipDeviceAttributeMultiprocessorCount, 0);
    (void)hipMemcpy2DAsync(p, 16, p, 16, 16, 2, hipMemcpyDeviceToDevice, 0);
    (void)hipMemset2DAsync(p, 16, 0, 16, 2, 0);
    (void)hipHostFree(h);
    return 0;
}
'''

ERR = re.compile(r'^(?P<file>[^\s(]+)\((?P<line>\d+)\): error')


def code(line):
    """The line without a trailing // comment, right-stripped."""
    return line.split('//', 1)[0].rstrip()


def statement_span(lines, i):
    """(start, end) line indices of the statement that contains line i."""
    s = i
    while s > 0:
        prev = code(lines[s - 1])
        if prev.endswith((';', '{', '}', ':')) or prev.lstrip().startswith('#') or prev == '':
            break
        s -= 1
    e = i
    while e < len(lines) - 1 and not code(lines[e]).endswith(';'):
        e += 1
    return s, e


def function_span(lines, i):
    """(start, end) of the function (with its template line) around line i."""
    s = i
    while s > 0 and not re.match(r'^(template|__HIP_DEPRECATED|inline|static)', lines[s]):
        s -= 1
    if s > 0 and lines[s - 1].startswith('template'):
        s -= 1
    depth, e, opened = 0, s, False
    while e < len(lines):
        depth += lines[e].count('{') - lines[e].count('}')
        opened = opened or '{' in lines[e]
        if opened and depth <= 0:
            break
        e += 1
    return s, e


def patch_file(path, err_lines, log):
    with open(path) as f:
        lines = f.read().split('\n')
    done = set()
    for n in sorted(set(err_lines), reverse=True):
        i = n - 1
        if i in done or i >= len(lines):
            continue
        if 'texture<' in lines[i] or 'texture<' in ''.join(lines[max(0, i - 3):i + 1]) and \
                not lines[i].lstrip().startswith('return'):
            s, e = function_span(lines, i)
            log.append('%s:%d-%d deleted (texture reference function)' % (path, s + 1, e + 1))
            lines[s:e + 1] = ['// [flashattn] removed: texture references are gone from CUDA 12+']
            done.update(range(s, e + 1))
            continue
        s, e = statement_span(lines, i)
        stmt = ' '.join(l.strip() for l in lines[s:e + 1])
        in_case = s > 0 and re.match(r'^\s*case\b.*:\s*$', lines[s - 1]) is not None
        indent = re.match(r'^\s*', lines[s]).group(0)
        if stmt.startswith('return') or in_case:
            new = indent + 'return hipErrorNotSupported;   // [flashattn] not in this CUDA'
        else:
            new = indent + '// [flashattn] removed (not in this CUDA): ' + stmt[:80]
        log.append('%s:%d-%d: %s -> %s' % (path, s + 1, e + 1, stmt[:100], new.strip()[:60]))
        lines[s:e + 1] = [new]
        done.update(range(s, e + 1))
    with open(path, 'w') as f:
        f.write('\n'.join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('dest', nargs='?', default='build-hip-nvidia/hip-headers')
    ap.add_argument('--src', default='/usr/include/hip')
    ap.add_argument('--nvcc', default='nvcc')
    args = ap.parse_args()
    if not os.path.isdir(args.src):
        sys.exit('no HIP headers at %s: apt-get install libamdhip64-dev' % args.src)
    dest = os.path.abspath(args.dest)
    inc = os.path.join(dest, 'include')
    if os.path.exists(inc):
        shutil.rmtree(inc)
    os.makedirs(inc)
    shutil.copytree(args.src, os.path.join(inc, 'hip'))
    log = []
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, 'probe.cu')
        with open(probe, 'w') as f:
            f.write(PROBE)
        for rnd in range(8):
            r = subprocess.run([args.nvcc, '-std=c++17', '-D__HIP_PLATFORM_NVIDIA__', '-isystem', inc,
                                '-c', probe, '-o', os.path.join(tmp, 'probe.o')],
                               capture_output=True, text=True)
            if r.returncode == 0:
                break
            errs = {}
            for line in (r.stdout + r.stderr).splitlines():
                m = ERR.match(line)
                if m and os.path.abspath(m.group('file')).startswith(inc):
                    errs.setdefault(os.path.abspath(m.group('file')), []).append(int(m.group('line')))
            if not errs:
                sys.stderr.write(r.stdout + r.stderr)
                sys.exit('nvcc fails outside the HIP headers; nothing to patch')
            for path, ls in errs.items():
                patch_file(path, ls, log)
        else:
            sys.stderr.write(r.stdout + r.stderr)
            sys.exit('the HIP headers still do not compile after 8 rounds')
    with open(os.path.join(dest, 'PATCHES.txt'), 'w') as f:
        f.write('HIP headers from %s patched for %s (%d edits):\n' % (args.src, args.nvcc, len(log)))
        f.write('\n'.join(log) + '\n')
    print('%s: HIP headers for the NVIDIA platform, %d edits (PATCHES.txt)' % (inc, len(log)))


if __name__ == '__main__':
    main()
