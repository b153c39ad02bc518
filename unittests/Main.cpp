//===- Main.cpp - snapkv-unittests ----------------------------------------===//
//
// Small C++ checks of APIs, each printing what a FileCheck test under
// test/Unit reads.
//
//===----------------------------------------------------------------------===//

int runSelectBuilderTests();
int runBudgetTests();

int main() {
  int failures = runSelectBuilderTests();
  failures += runBudgetTests();
  return failures ? 1 : 0;
}
