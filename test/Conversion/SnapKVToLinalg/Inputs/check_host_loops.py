"""Fails if printed MLIR has a loop outside structured ops whose trip count is not a
small constant. An IREE-style compiler puts structured (linalg) ops into dispatches and
runs everything else on the host, so a host loop over prompt positions or heads would run
element by element there.

Usage: check_host_loops.py [--max-trips N] < module.mlir
"""

import re
import sys


def main():
    max_trips = 64
    if len(sys.argv) == 3 and sys.argv[1] == "--max-trips":
        max_trips = int(sys.argv[2])
    constants = {}
    stack = []  # names of the ops whose regions enclose the current line
    bad, seen = [], 0
    for number, line in enumerate(sys.stdin, 1):
        text = line.strip()
        m = re.match(r"(%[\w.]+) = arith\.constant (-?\d+) : index", text)
        if m:
            constants[m.group(1)] = int(m.group(2))
        op = re.search(r"\b((?:scf|linalg|func|tensor)\.[\w.]+)", text)
        if op and op.group(1) in ("scf.for", "scf.while"):
            seen += 1
            inside_structured = any(name.startswith("linalg.") for name in stack)
            loop = re.search(r"scf\.for %[\w]+ = (%?[\w.]+) to (%?[\w.]+) step (%?[\w.]+)",
                             text)
            trips = None
            if loop:
                lo, hi, step = (constants.get(v) for v in loop.groups())
                if None not in (lo, hi, step) and step > 0:
                    trips = (hi - lo + step - 1) // step
            if not inside_structured and (trips is None or trips > max_trips):
                bad.append(f"line {number}: {text[:160]}")
        if text.startswith("}"):
            for _ in range(text.count("}") - text.count("{")):
                if stack:
                    stack.pop()
            continue
        opened = text.count("{") - text.count("}")
        for _ in range(max(opened, 0)):
            stack.append(op.group(1) if op else "?")
    if bad:
        print("host loops outside structured ops:\n  " + "\n  ".join(bad))
        return 1
    print(f"ok: {seen} loops, none on the host beyond {max_trips} trips")
    return 0


if __name__ == "__main__":
    sys.exit(main())
