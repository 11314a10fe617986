#!/usr/bin/env python3
"""tests/cuda/sass_check.py: static checks of matvec version 3's machine code (SASS).

    sass_check.py MODULE [--arch sm_90] [--max-regs 128]

Disassembles MODULE (libinferlab-cuda.so, or a cubin) with cuobjdump and checks every instance
of il__k_mv3<T, NT, W, U> for each SASS architecture in it:
  - registers within the budget (--max-regs), no stack frame and no local memory (no STL/LDL);
  - 16-byte global loads (LDG.E.128) and no 1- or 2-byte global loads (LDG.*.U8/S8/U16/S16);
  - IDP.4A (dp4a) in the quantized instances, none in the float ones;
and il__k_quant_x (the activation quantizer) for local memory. Prints one line per weight type with the figures seen.
cuobjdump (and the nvdisasm it runs for -sass) come from $IL_CUOBJDUMP / $NVDISASM_PATH, PATH,
/usr/local/cuda/bin, or PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm packages
(site-packages/nvidia/cu*/bin). Exit 0: all checks passed; 1: a check failed; 77: no cuobjdump or
nvdisasm (the test skips, saying so).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

TYPES = {0: "f32", 1: "f16", 30: "bf16", 8: "q8_0", 2: "q4_0", 3: "q4_1", 12: "q4_K", 13: "q5_K", 14: "q6_K"}
FLOAT = {0, 1, 30}


def find_tool(name, env):
    if os.environ.get(env):
        p = os.environ[env]
        p = os.path.join(p, name) if os.path.isdir(p) else p
        return p if os.access(p, os.X_OK) else None
    p = shutil.which(name)
    if p:
        return p
    cands = ["/usr/local/cuda/bin/" + name]
    for sp in sys.path + [os.path.join(sys.prefix, "lib")]:
        cands += glob.glob(os.path.join(sp, "nvidia", "cu*", "bin", name))
        cands += glob.glob(os.path.join(sp, "nvidia", "cuda_*", "bin", name))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("module")
    ap.add_argument("--arch", default=None, help="only this SASS architecture (sm_90); default: every one")
    ap.add_argument("--max-regs", type=int, default=128)
    a = ap.parse_args()
    cuobjdump = find_tool("cuobjdump", "IL_CUOBJDUMP")
    nvdisasm = find_tool("nvdisasm", "NVDISASM_PATH")
    if not cuobjdump or not nvdisasm:
        print("SKIP: no %s (PATH, /usr/local/cuda/bin, $IL_CUOBJDUMP/$NVDISASM_PATH, or pip install "
              "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm): the SASS of matvec v3 is not checked"
              % ("cuobjdump" if not cuobjdump else "nvdisasm"))
        return 77
    if not os.path.exists(a.module):
        print("sass_check: %s: no such file" % a.module)
        return 1
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""),
               NVDISASM_PATH=os.path.dirname(nvdisasm))
    args = [cuobjdump] + (["-arch", a.arch] if a.arch else [])
    res = subprocess.run(args + ["-res-usage", a.module], capture_output=True, text=True, env=env)
    sass = subprocess.run(args + ["-sass", a.module], capture_output=True, text=True, env=env)
    if res.returncode or sass.returncode:
        print("sass_check: cuobjdump failed:", (res.stderr + sass.stderr).strip())
        return 1
    # resources per (arch, function): cuobjdump -res-usage lists them per ELF, in arch order
    usage = {}
    arch = None
    fn = None
    for line in res.stdout.splitlines():
        m = re.search(r"arch = (sm_\d+a?)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r"\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)
        if m and fn:
            usage[(arch, fn)] = tuple(int(g) for g in m.groups())
            fn = None
    code = {}
    arch = None
    fn = None
    for line in sass.stdout.splitlines():
        m = re.search(r"code for (sm_\d+a?)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            fn = m.group(1)
            code[(arch, fn)] = []
            continue
        if fn:
            m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
            if m:
                code[(arch, fn)].append(m.group(1))
    failed = []
    per_type = {}
    n_inst = 0
    for (arch, fn), ops in sorted(code.items()):
        m = re.search(r"il__k_mv3(?:_multi)?ILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", fn)
        quant = "il__k_quant_x" in fn
        if not m and not quant:
            continue
        u = None
        for (ua, uf), v in usage.items():
            if uf == fn and (ua == arch or ua is None):
                u = v
        if u is None:
            u = next((v for (ua, uf), v in usage.items() if uf == fn), None)
        name = fn if not m else "il__k_mv3<%s, %s, %s, %s>" % (TYPES.get(int(m.group(1)), m.group(1)), m.group(2),
                                                                m.group(3), m.group(4))
        local = [o for o in ops if o.startswith(("STL", "LDL"))]
        if u is None:
            failed.append("%s %s: no resource usage line" % (arch, name))
            continue
        regs, stack, _shared, lmem = u
        if stack or lmem or local:
            failed.append("%s %s: stack %d, local %d bytes, %d STL/LDL" % (arch, name, stack, lmem, len(local)))
        if quant:
            continue
        n_inst += 1
        t = int(m.group(1))
        wide = sum(1 for o in ops if o.startswith("LDG.E.128"))
        narrow = [o for o in ops if o.startswith("LDG") and re.search(r"\.(U8|S8|U16|S16)\b", o)]
        dp4a = sum(1 for o in ops if o.startswith("IDP.4A"))
        if regs > a.max_regs:
            failed.append("%s %s: %d registers > %d" % (arch, name, regs, a.max_regs))
        if not wide:
            failed.append("%s %s: no 16-byte global load (LDG.E.128)" % (arch, name))
        if narrow:
            failed.append("%s %s: byte or 16-bit global loads: %s" % (arch, name, ", ".join(sorted(set(narrow)))))
        if t in FLOAT and dp4a:
            failed.append("%s %s: IDP.4A in a float kernel" % (arch, name))
        if t not in FLOAT and not dp4a:
            failed.append("%s %s: no IDP.4A (dp4a)" % (arch, name))
        p = per_type.setdefault((arch, TYPES.get(t, str(t))), [10**9, 0, 10**9, 0, 0, 0])
        p[0], p[1] = min(p[0], regs), max(p[1], regs)
        p[2], p[3] = min(p[2], wide), max(p[3], wide)
        p[4] += dp4a
        p[5] += 1
    if not n_inst:
        print("sass_check: no il__k_mv3 instance in %s" % a.module)
        return 1
    for (arch, t), p in sorted(per_type.items()):
        print("%s %-5s %2d instances: registers %d-%d, LDG.E.128 %d-%d an instance, IDP.4A %d, no local memory, "
              "no byte loads" % (arch, t, p[5], p[0], p[1], p[2], p[3], p[4]))
    for f in failed:
        print("FAILED:", f)
    print("%d passed, %d failed" % (n_inst - len({f.split(":")[0] for f in failed}), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
