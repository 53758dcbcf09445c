#!/usr/bin/env python3
"""Rewrites one gpu/cuda/*.cu into host C++ for the CPU emulator (emu.h).

Usage: xform.py IN.cu OUT.cpp

Only what a C preprocessor cannot express is rewritten; emu.h defines the
rest (threadIdx, __syncthreads, shuffles, intrinsics):
  kern<<<grid, block[, smem[, stream]]>>>(args)
      -> emu_launcher(kern, emu_cfg(grid, block, smem, stream))(args)
  extern __shared__ [__align__(n)] T sm[];
                                  -> T *sm = (T *)emu_dyn_smem();
  __shared__ T a[n], b;           -> static T a[n], b; EMU_SHARED(a); ...
A `#line 1` keeps compiler messages pointing at the .cu. Any `__shared__`
or `<<<` left over (a form this script does not know) is an error, so
that a new kernel is not silently emulated wrong.
"""
import re
import sys


def shared(m):
    typ, decls = m.group(1), m.group(2)
    names = []
    for d in decls.split(','):
        n = re.match(r'\s*([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$', d)
        if not n:
            raise SystemExit('xform.py: cannot parse __shared__ %s %s'
                             % (typ, decls))
        names.append(n.group(1))
    return 'static %s %s; %s' % (
        typ, decls, ' '.join('EMU_SHARED(%s);' % n for n in names))


def launch(m):
    # The newlines of the whitespace dropped go after the call, so that
    # the lines after it keep their numbers.
    nl = m.group(0).count('\n') - m.group(1).count('\n') - \
        m.group(2).count('\n')
    return 'emu_launcher(%s, emu_cfg(%s))%s(' % (m.group(1), m.group(2),
                                                 '\n' * nl)


def main():
    src_path, out_path = sys.argv[1], sys.argv[2]
    src = open(src_path).read()
    src = re.sub(r'extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?'
                 r'([A-Za-z_][\w ]*?)\s+(\w+)\s*\[\s*\]\s*;',
                 r'\1 *\2 = (\1 *)emu_dyn_smem();', src)
    src = re.sub(r'__shared__\s+([A-Za-z_][\w:]*)\s+([^;]+);', shared, src)
    src = re.sub(r'([A-Za-z_]\w*(?:<[^<>()]*>)?)\s*<<<(.*?)>>>\s*\(', launch,
                 src, flags=re.S)
    for left in ('__shared__', '<<<'):
        if left in src:
            line = src[:src.index(left)].count('\n') + 1
            raise SystemExit('%s:%d: xform.py: %s in a form it does not '
                             'rewrite' % (src_path, line, left))
    with open(out_path, 'w') as f:
        f.write('#include "emu.h"\n#line 1 "%s"\n%s' % (src_path, src))


main()
