#!/usr/bin/env python3
"""scripts/sweep_check_contains: the mechanical rewrite of string checks in tests to the
harness's IL_CHECK_CONTAINS, which prints the haystack when it fails. Rerun it on a branch that
adds bare strstr checks:  python3 scripts/sweep_check_contains.py tests/*.c

IL_CHECK(strstr(A, B)) and IL_CHECK(strstr(A, B) != NULL) -> IL_CHECK_CONTAINS(A, B);
IL_CHECK(!strstr(A, B)) and IL_CHECK(strstr(A, B) == NULL) -> IL_CHECK_NOT_CONTAINS(A, B).
Only when the whole IL_CHECK argument is that one call with exactly two top-level arguments;
compound conditions (a && b) are left as they are."""
import sys, re

def scan_call(s, i):
    """s[i] == '('. Return (index after matching ')', [top-level arg strings]) or None."""
    depth = 0; args = []; start = i + 1; j = i
    while j < len(s):
        c = s[j]
        if c in '"\'':
            q = c; j += 1
            while j < len(s) and s[j] != q:
                if s[j] == '\\': j += 1
                j += 1
        elif s[j:j+2] == '/*':
            j = s.index('*/', j) + 1
        elif c == '(':
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                args.append(s[start:j]); return j + 1, args
        elif c == ',' and depth == 1:
            args.append(s[start:j]); start = j + 1
        j += 1
    return None

total = 0
for path in sys.argv[1:]:
    s = open(path).read(); out = []; i = 0; n = 0
    pat = re.compile(r'\bIL_CHECK\(\s*(!?)\s*strstr\s*\(')
    while True:
        m = pat.search(s, i)
        if not m: out.append(s[i:]); break
        neg = m.group(1) == '!'
        paren = m.end() - 1
        r = scan_call(s, paren)
        ok = False
        if r:
            end, args = r
            k = end
            while k < len(s) and s[k] in ' \t\n': k += 1
            cmp = re.match(r'(!=|==)\s*NULL\s*', s[k:])
            if cmp and not neg:
                neg = cmp.group(1) == '=='
                k += cmp.end()
            elif cmp:
                k = -1  # !strstr(..) == NULL: leave it to a person
            if k >= 0 and len(args) == 2 and k < len(s) and s[k] == ')':
                a, b = args[0].strip(), args[1].strip()
                # keep the line breaks the original had between the two arguments
                sep = ',' + args[1][:len(args[1]) - len(args[1].lstrip())]
                if '\n' not in sep: sep = ', '
                name = 'IL_CHECK_NOT_CONTAINS' if neg else 'IL_CHECK_CONTAINS'
                out.append(s[i:m.start()]); out.append(f'{name}({a}{sep}{b})')
                i = k + 1; n += 1; ok = True
        if not ok:
            out.append(s[i:m.end()]); i = m.end()
    if n:
        open(path, 'w').write(''.join(out)); print(f'{path}: {n}'); total += n
print('total', total)
