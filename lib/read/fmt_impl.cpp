// fmt's implementation, compiled once for everything that links lib/read (the shim, the collector, the tests).
// fmt is used from its headers only, as the .so must not need libfmt.so; without FMT_HEADER_ONLY every other file
// declares these functions instead of compiling fmt's implementation again, which had been about half of the
// code each one generated. The two templates below are the ones format.h declares `extern template` for char.
#ifndef FMT_HEADER_ONLY  // test/fuzz/run.sh compiles lib/read with fmt header-only: nothing to add then
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
}  // namespace detail
FMT_END_NAMESPACE
#endif
