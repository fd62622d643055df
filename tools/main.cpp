// sluice CLI entry point (subcommands are filled in by tools/cmd_*.cpp).
#include <cstdio>
int main() { std::puts("sluice"); return 0; }
