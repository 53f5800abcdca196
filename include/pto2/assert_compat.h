// taskring's assert_compat.h: always_assert / debug_assert and AssertionError under the
// names Simpler's PTO2 sources use. A failed check throws AssertionError (or aborts when
// the translation unit is built without exceptions); taskring_pto2_enter turns an
// exception that leaves the orchestration entry into a fatal error of the run.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#pragma GCC visibility push(hidden)

// No backtrace is collected; the text of the failure names the condition and the place.
inline std::string get_stacktrace(int skip_frames = 1) {
    (void)skip_frames;
    return std::string();
}

class AssertionError : public std::runtime_error {
public:
    AssertionError(const char *condition, const char *file, int line) :
        std::runtime_error(describe(condition, file, line)),
        condition_(condition),
        file_(file),
        line_(line) {}

    const char *condition() const { return condition_; }
    const char *file() const { return file_; }
    int line() const { return line_; }

private:
    static std::string describe(const char *condition, const char *file, int line) {
        std::string text = "Assertion failed: ";
        text += condition ? condition : "?";
        text += "\n  Location: ";
        text += file ? file : "?";
        char at[16];
        std::snprintf(at, sizeof at, ":%d", line);
        text += at;
        return text;
    }

    const char *condition_;
    const char *file_;
    int line_;
};

[[noreturn]] inline void assert_impl(const char *condition, const char *file, int line) {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
    throw AssertionError(condition, file, line);
#else
    std::fprintf(stderr, "Assertion failed: %s at %s:%d\n", condition, file, line);
    std::abort();
#endif
}

#pragma GCC visibility pop

#define always_assert(cond)                              \
    do {                                                 \
        if (!(cond)) assert_impl(#cond, __FILE__, __LINE__); \
    } while (0)

#ifdef NDEBUG
#define debug_assert(cond) ((void)0)
#else
#define debug_assert(cond) always_assert(cond)
#endif

#define PTO_PRAGMA(x) _Pragma(#x)

#if defined(__clang__)
#define MAYBE_UNINITIALIZED_BEGIN                          \
    PTO_PRAGMA(clang diagnostic push)                      \
    PTO_PRAGMA(clang diagnostic ignored "-Wuninitialized") \
    PTO_PRAGMA(clang diagnostic ignored "-Wsometimes-uninitialized")
#define MAYBE_UNINITIALIZED_END PTO_PRAGMA(clang diagnostic pop)
#elif defined(__GNUC__)
#define MAYBE_UNINITIALIZED_BEGIN                        \
    PTO_PRAGMA(GCC diagnostic push)                      \
    PTO_PRAGMA(GCC diagnostic ignored "-Wuninitialized") \
    PTO_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized")
#define MAYBE_UNINITIALIZED_END PTO_PRAGMA(GCC diagnostic pop)
#else
#define MAYBE_UNINITIALIZED_BEGIN
#define MAYBE_UNINITIALIZED_END
#endif
