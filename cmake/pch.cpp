// An empty translation unit: the target that owns the test binaries'
// precompiled header (CMakeLists.txt, SLUICE_PCH).
