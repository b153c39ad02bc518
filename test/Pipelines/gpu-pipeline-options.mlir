// The GPU pipeline's options are checked when they are parsed, before any pass
// runs: an unknown device code format names the option.
// RUN: not snapkv-opt %s --snapkv-gpu-pipeline="format=ptx" 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not snapkv-opt %s --snapkv-gpu-emulation="format=cubin" 2>&1 | FileCheck %s --check-prefix=EMULATION
// And each format is accepted (printed back by the pass manager).
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-gpu-pipeline{format=isa})" --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=ISA

// FORMAT: for the --format option: Cannot find option named 'ptx'!
// EMULATION: for the --format option: Cannot find option named 'cubin'!
// ISA: gpu-module-to-binary{{.*}}format=isa

func.func @f() {
  return
}
