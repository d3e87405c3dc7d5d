// PYCOLLECT_CLONES: the attribute every kernel loop of reduce/ carries.
#pragma once

// Kernels are plain loops the compiler vectorises. On x86-64 each one is also built
// for AVX2 and picked at load time (target_clones), so the wheel stays portable. Not in a
// sanitized build (scripts/sanitize.sh): the loader runs the clones' resolvers before the
// sanitizer's runtime is set up, and the instrumented resolver crashes the program at load.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define PYCOLLECT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PYCOLLECT_CLONES
#endif
