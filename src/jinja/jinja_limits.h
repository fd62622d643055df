// Limits that keep a hostile or broken chat template from exhausting the
// server. A template comes from a model file or a --chat-template path, so it
// is input, not code: every resource it can spend is capped here, in one place.
// Each limit, when hit, fails the parse or the render with a Status that names
// the limit (kResourceExhausted), never a crash or an unbounded wait: a render
// ends within kMaxRenderMillis (plus one step) whatever the template does.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::jinja {

// Bytes of rendered text (and of any one string value built while rendering:
// `'x' * n`, join, indent, ...). A chat prompt is a few KiB to a few hundred KiB.
inline constexpr size_t kMaxOutputBytes = size_t{1} << 20;  // 1 MiB

// Loop iterations summed over the whole render (all {% for %} loops, plus the
// items that range(), filters like map/select and string * int may produce).
inline constexpr int64_t kMaxLoopIterations = 1'000'000;

// Nested macro calls (including caller() from a {% call %} block): stops
// unbounded recursion long before the C++ stack would.
inline constexpr int kMaxCallDepth = 64;

// Nesting of blocks ({% if %} in {% for %} in ...) and of expressions
// (parentheses, lists, operators) accepted by the parser. The parser and the
// renderer recurse once per level, so this bounds their stack use.
inline constexpr int kMaxParseDepth = 200;

// Depth of the renderer's own recursion: expressions being evaluated inside
// expressions, blocks inside blocks, summed across macro calls. Parse depth and
// call depth each stay small, but a macro whose deep expression calls the macro
// again multiplies them; this caps the product, and so the C++ stack a render uses.
inline constexpr int kMaxRenderDepth = 1000;

// Wall-clock time of one render. The counts above bound the work of each step,
// but not its cost times the number of steps: a million iterations that each
// build a string near kMaxOutputBytes would take minutes. The renderer reads
// the clock as it goes (every kRenderClockStride evaluations and iterations)
// and stops once a render has run this long. Real chat templates render in
// milliseconds, even for long conversations; this is far above them (with room
// for a machine under load), and short enough that a request with a runaway
// template gets its 400 in seconds, not minutes. (JinjaRenderOptions can lower it.)
inline constexpr int64_t kMaxRenderMillis = 5000;
inline constexpr uint32_t kRenderClockStride = 64;

// Size of the template source itself.
inline constexpr size_t kMaxTemplateBytes = size_t{1} << 20;  // 1 MiB

}  // namespace sluice::jinja
