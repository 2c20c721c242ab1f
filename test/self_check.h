// The self-tests of the test doubles (fake libnccl.so.2, fake libcuda.so.1) are plain programs: a check that fails
// says where and what, counts, and the run goes on; check_summary() then gives the exit status.
#pragma once

#include <cstdio>

namespace ncw_test {

inline int& check_failures() {
    static int n = 0;
    return n;
}

// 0 when every check passed; prints the outcome under `name`.
inline int check_summary(const char* name) {
    if (check_failures()) {
        std::fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures());
        return 1;
    }
    std::fprintf(stderr, "%s: all checks passed\n", name);
    return 0;
}

}  // namespace ncw_test

#define EXPECT(cond)                                                                \
    do {                                                                            \
        if (!(cond)) {                                                              \
            std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
            ++::ncw_test::check_failures();                                         \
        }                                                                           \
    } while (0)
