#!/usr/bin/env python3
"""Writes a libFuzzer seed corpus from the lit tests: one file per
`// -----` split of every .mlir test, RUN/CHECK comment lines dropped. The
imported model fixtures (test/Models, ~1 MB each) are left out: inputs that
large slow libFuzzer down a hundredfold."""
import pathlib
import sys


def seeds(test_dir: str):
    """(test file, seed text) for every split of every lit test but the model fixtures."""
    for path in sorted(pathlib.Path(test_dir).rglob("*.mlir")):
        if "Models" in path.parts:
            continue
        for part in path.read_text().split("// -----"):
            lines = [line for line in part.splitlines() if not line.lstrip().startswith("//")]
            text = "\n".join(lines).strip()
            if text:
                yield path, text + "\n"


def main(test_dir: str, out_dir: str) -> None:
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for _, text in seeds(test_dir):
        (out / f"seed-{count:04d}.mlir").write_text(text)
        count += 1
    print(f"fuzz-seeds: {count} seeds in {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
