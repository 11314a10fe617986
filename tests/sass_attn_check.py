#!/usr/bin/env python3
"""tests/sass_attn_check: static SASS checks of the CUDA flash attention kernels.

Disassembles the kernels of attn_fd.cu and attn_fa.cu from the built module, or faster from
their object files (CTest passes those), with cuobjdump and checks, for every architecture:
  - every flash kernel: no local memory (LOCAL 0 and STACK 0 in -res-usage; no LDL/STL) for
    sm_90, the architecture the kernels are measured on; for sm_8x a stack frame of at most
    8 bytes (ptxas spills one register in some flash-decoding instances there) is printed as a
    note, anything more fails;
  - the prefill kernel (il__k_fa): HMMA.16816.F32 and LDSM (ldmatrix) present, i.e. it runs
    on the tensor cores;
  - flash-decoding with 16-byte loads (il__k_fd_split<T, true>): LDG.E.128 present.
Usage: sass_attn_check.py FILE...   (the module or objects; cuobjdump from $IL_CUOBJDUMP or PATH; PyPI's
nvidia-cuda-cuobjdump with nvidia-cuda-nvdisasm on PATH). Exit 0 when every check passed,
1 when one failed (each failure printed), 77 when cuobjdump (or nvdisasm) is missing or the
file has no flash kernels (a CPU-only build).
"""
import os
import re
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda"))
from sass_check import find_tool  # noqa: E402 (one search for the tools: PATH, the toolkit, PyPI's wheels)

_ENV = dict(os.environ)


def tool():
    nvdisasm = find_tool("nvdisasm", "NVDISASM_PATH")
    if nvdisasm:  # cuobjdump -sass runs nvdisasm from PATH
        _ENV["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + _ENV.get("PATH", "")
    return find_tool("cuobjdump", "IL_CUOBJDUMP")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=_ENV)
    return p.returncode, p.stdout + p.stderr


def functions(sass):
    """{(arch, mangled name): body} from cuobjdump -sass output."""
    out, arch, name, body = {}, "?", None, []
    for line in sass.splitlines():
        m = re.match(r"\s*(?:arch = |code for )(sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                out[(arch, name)] = "\n".join(body)
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        out[(arch, name)] = "\n".join(body)
    return out


def main():
    if len(sys.argv) < 2:
        print("usage: sass_attn_check.py FILE...", file=sys.stderr)
        return 64
    objs = sys.argv[1:]
    obj = ", ".join(objs)
    cu = tool()
    if not cu:
        print("SKIP: no cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; or set IL_CUOBJDUMP)")
        return 77
    sass, res = "", ""
    for o in objs:
        rc, text = run([cu, "-sass", o])
        if rc != 0:
            if "nvdisasm" in text:
                print("SKIP: cuobjdump needs nvdisasm on PATH (pip install nvidia-cuda-nvdisasm)")
                return 77
            print("FAILED: %s -sass %s: %s" % (cu, o, text.strip()[:400]))
            return 1
        sass += text + "\n"
        res += run([cu, "-res-usage", o])[1] + "\n"
    fns = {k: v for k, v in functions(sass).items() if re.search(r"il__k_f[ad]", k[1])}
    if not fns:
        print("SKIP: %s holds no flash attention kernels" % obj)
        return 77
    fails, checks = [], 0

    def need(cond, what):
        nonlocal checks
        checks += 1
        if not cond:
            fails.append(what)

    archs = sorted({a for a, _ in fns})
    notes = []
    stacks = {}
    fn, arch = None, "?"
    for line in res.splitlines():
        m = re.search(r"(?:arch = |code for |Resource usage.*)(sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function (\S+):", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"STACK:(\d+).*LOCAL:(\d+)", line)
        if m and fn and re.search(r"il__k_f[ad]", fn):
            stacks[(arch, fn)] = (int(m.group(1)), int(m.group(2)))
            fn = None

    def small_ok(arch, name):
        st = stacks.get((arch, name))
        return arch.startswith("sm_8") and st is not None and st[0] <= 8 and st[1] == 0

    for (arch, name), body in sorted(fns.items()):
        local = bool(re.search(r"\b(LDL|STL)\b", body))
        if local and small_ok(arch, name):
            notes.append("%s %s: a %d-byte stack frame (one spilled register)" % (arch, name, stacks[(arch, name)][0]))
        else:
            need(not local, "%s %s: local memory loads/stores" % (arch, name))
        if name.startswith("_Z8il__k_fa"):
            need("HMMA.16816.F32" in body, "%s %s: no HMMA.16816.F32 (mma.sync m16n8k16)" % (arch, name))
            need("LDSM" in body, "%s %s: no LDSM (ldmatrix)" % (arch, name))
        if name.startswith("_Z14il__k_fd_split") and re.search(r"ELb1E", name):
            need("LDG.E.128" in body, "%s %s: no 16-byte loads (LDG.E.128)" % (arch, name))
    for (arch, name), (st, lo) in sorted(stacks.items()):
        if not (st == 0 and lo == 0) and not small_ok(arch, name):
            need(False, "%s %s: stack %d, local %d bytes" % (arch, name, st, lo))
        else:
            need(True, "")
    n_fa = sum(1 for _, n in fns if n.startswith("_Z8il__k_fa"))
    n_fd = sum(1 for _, n in fns if n.startswith("_Z14il__k_fd_split"))
    need(n_fa > 0 and n_fd > 0, "prefill (%d) and decode (%d) kernels both present" % (n_fa, n_fd))
    for n in notes:
        print("note: " + n)
    for f in fails:
        print("FAILED: " + f)
    print("sass_attn_check: %d flash kernels x architectures (%s; %d prefill, %d decode): %d checks, %d failed"
          % (len(fns), ", ".join(archs), n_fa, n_fd, checks, len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
