#!/usr/bin/env python3
"""Rewrites a CUDA source for the emulator (tests/cuda_emu/README.md): every
kernel<<<grid, block[, smem[, stream]]>>>(args) launch becomes
::sluice_emu::launch(grid, block[, smem[, stream]])([=](auto&&... a) { kernel(a...); }, args),
which g++ compiles (sluice_emu/device.h). Everything else is copied as it is.
Usage: rewrite_launches.py IN OUT"""
import os
import re
import sys

# A kernel name, possibly qualified, with template arguments nested one deep.
LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<(?:[^<>]|<[^<>]*>)*>)?)<<<(.*?)>>>\((\s*\))?")


def launch(m):
    call = f"[=](auto&&... sluice_emu_a) {{ {m.group(1)}(sluice_emu_a...); }}"
    rest = ")" if m.group(3) else ", "
    return f"::sluice_emu::launch({m.group(2)})({call}{rest}"


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    text = LAUNCH.sub(launch, text)
    leftover = [i + 1 for i, line in enumerate(text.splitlines()) if "<<<" in line.split("//")[0]]
    if leftover:
        sys.exit(f"{src}: a launch the emulator's rewrite does not recognise, line(s) {leftover}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{src}"\n')
        f.write(text)


if __name__ == "__main__":
    main()
