"""The fuzz harness's contract on its own seeds, without the fuzzer: every lit input that
verifies must go through the pass pipelines of tools/snapkv-fuzz/snapkv-fuzz.cpp (a
pass that fails on verified input is a bug there, and the harness aborts). CI's
`make fuzz-smoke` found a seed that broke it (docs/reliability.md, F9); this finds such a
seed in `make test`, in seconds."""
import importlib.util
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from snapkv import tools

REPO = Path(__file__).resolve().parents[2]

# Mirrors LLVMFuzzerTestOneInput's variants (keep the two in step). The harness runs
# "chunked" only on modules with an @extend_layer.
REWRITE = "snapkv-compress-kv-cache{window=2 capacity=6 kernel=3 %s}"
VARIANTS = {
    "expand": (REWRITE % "gqa=expand", ""),
    "pyramid": (REWRITE % "gqa=mean budget=pyramid pyramid-beta=2", ",snapkv-decompose-select"),
    "adaptive": (REWRITE % "gqa=mean budget=adaptive floor=1", ""),
    "chunked": (REWRITE % "gqa=mean chunk=4 decode-interval=4 decode-capacity=5 "
                "prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer",
                ""),
}


def pipeline(variant: str) -> str:
    rewrite, decompose = VARIANTS[variant]
    return (f"builtin.module({rewrite},func.func(snapkv-fuse-attention),"
            f"snapkv-append-in-place{decompose},convert-snapkv-to-linalg)")


def _seeds():
    spec = importlib.util.spec_from_file_location("fuzz_seeds", REPO / "scripts" / "fuzz-seeds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.seeds(REPO / "test"))


def _run(args, text):
    return subprocess.run([str(tools.snapkv_opt()), "-", "-o", "/dev/null", *args], input=text,
                          capture_output=True, text=True, timeout=120)


def _failures(item):
    path, text = item
    if _run([], text).returncode != 0:  # rejected input: the harness skips it too
        return []
    return [f"{path.relative_to(REPO)} [{variant}]: "
            + next((line for line in done.stderr.splitlines() if "error" in line), done.stderr)
            for variant in VARIANTS
            if variant != "chunked" or "@extend_layer(" in text
            for done in [_run([f"--pass-pipeline={pipeline(variant)}"], text)]
            if done.returncode != 0]


def test_every_verified_seed_rewrites_and_lowers():
    seeds = _seeds()
    assert len(seeds) > 300  # the splitter found the lit tests
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for found in pool.map(_failures, seeds) for f in found]
    assert not failures, "\n".join(failures)


def test_a_configuration_the_conversion_refuses_does_not_verify():
    # F9's seed: before the verifier knew, it verified and then failed to lower.
    text = (REPO / "tools" / "snapkv-fuzz" / "regressions"
            / "attention-config-on-gpu-blocks").read_text()
    done = _run([], text)
    assert done.returncode != 0
    assert "has no GPU lowering: its snapkv.lowering_config cannot map it to gpu_blocks" \
        in done.stderr
