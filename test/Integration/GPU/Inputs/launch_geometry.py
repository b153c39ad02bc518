"""Prints the launch geometry of the kernels in host code lowered by --snapkv-gpu-pipeline:
one line per gpu.launch_func, in order, with the grid, block size and dynamic shared memory
resolved from the function's llvm.mlir.constant values ("?" when not a constant).

Usage: launch_geometry.py < lowered.mlir
"""

import re
import sys

CONSTANT = re.compile(r"(%[\w.]+) = llvm\.mlir\.constant\((-?\d+) : (?:index|i\d+)\)")
LAUNCH = re.compile(
    r"gpu\.launch_func .*?@([\w.]+)::@[\w.]+ blocks in \((%[\w.]+), (%[\w.]+), (%[\w.]+)\) "
    r"threads in \((%[\w.]+), (%[\w.]+), (%[\w.]+)\)(?: : \w+)?"
    r"(?: dynamic_shared_memory_size (%[\w.]+))?")


def main():
    constants = {}
    for line in sys.stdin:
        if re.match(r"\s*llvm\.func @", line) and line.rstrip().endswith("{"):
            constants = {}
            print("func", re.search(r"@([\w.]+)", line).group(1))
        for name, value in CONSTANT.findall(line):
            constants[name] = int(value)
        m = LAUNCH.search(line)
        if not m:
            continue
        kernel, *dims, smem = m.groups()
        grid = [constants.get(d, "?") for d in dims[:3]]
        block = [constants.get(d, "?") for d in dims[3:]]
        blocks = grid[0] * grid[1] * grid[2] if all(isinstance(g, int) for g in grid) else "?"
        shared = constants.get(smem, "?") if smem else 0
        print(f"launch {kernel} grid {grid[0]}x{grid[1]}x{grid[2]} blocks {blocks} "
              f"threads {block[0]}x{block[1]}x{block[2]} shared {shared}")


if __name__ == "__main__":
    main()
