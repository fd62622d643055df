// Renderer: the state of one JinjaTemplate::render() call: variable scopes,
// the counters that enforce jinja_limits.h, and the output. Internal to the
// Jinja files; its methods are spread by concept:
//   jinja.cpp          statements, loops, macros, globals
//   jinja_eval.cpp     expressions (operators, indexing, slicing, calls)
//   jinja_filters.cpp  filters (`x | name(args)`)
//   jinja_tests.cpp    tests (`x is name(args)`)
//   jinja_methods.cpp  methods of str, dict and list values
// Errors are thrown as JinjaError (jinja_error.h) and become a Status in
// JinjaTemplate::render. One Renderer per render; not shared between threads.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "jinja/jinja.h"
#include "jinja/jinja_error.h"
#include "jinja/jinja_parse.h"
#include "jinja/jinja_value.h"

namespace sluice::jinja {

class Renderer {
 public:
  Renderer(const nlohmann::ordered_json& context, const JinjaRenderOptions& options);

  // What a statement list asks of the enclosing loop.
  enum class Flow { kNormal, kBreak, kContinue };
  // Appends the rendering of `nodes` to *out (jinja.cpp).
  Flow render(const NodeList& nodes, std::string* out);

  // The value of an expression (jinja_eval.cpp).
  JinjaValue eval(const Expr& e);
  // Calls a function value (macro, global, bound method) with arguments.
  JinjaValue call_value(const JinjaValue& fn, JinjaArgs& args, int line);

  // `value | name(args)` (jinja_filters.cpp); `value is name(args)` (jinja_tests.cpp).
  JinjaValue apply_filter(const std::string& name, const JinjaValue& value, JinjaArgs& args, int line);
  bool apply_test(const std::string& name, const JinjaValue& value, JinjaArgs& args, int line);
  // `obj.name(args)` for str, dict and list values (jinja_methods.cpp).
  JinjaValue call_method(const JinjaValue& obj, const std::string& name, JinjaArgs& args, int line);

  // The items `for` iterates: list items, dict keys, string characters; an
  // undefined value is empty; anything else fails.
  JinjaList iterate(const JinjaValue& v, int line);
  // Counts `n` more iterations against kMaxLoopIterations (and reads the clock).
  void count_iterations(int64_t n, int line);
  // Fails once the render has run options.max_render_ms (kMaxRenderMillis);
  // reads the clock every kRenderClockStride calls.
  void check_deadline(int line);
  // Fails if a string being built would pass kMaxOutputBytes.
  void check_size(size_t bytes, int line) const;
  // Fails if putting `v` into `container` (a list or dict) would make the
  // container reach itself: values stay acyclic, so printing, comparing and
  // releasing them ends. Visits each container `v` reaches once.
  void check_acyclic(const JinjaValue& container, const JinjaValue& v, int line);
  // Fails, with jinja2's message, when an undefined value is used where jinja2 raises.
  [[noreturn]] void undefined_error(const JinjaValue& v, int line) const;

 private:
  // Counts one level of recursion against kMaxRenderDepth while alive.
  struct DepthGuard {
    DepthGuard(Renderer* r, int line);
    ~DepthGuard() { --r_->render_depth_; }
    Renderer* r_;
  };
  JinjaValue eval_expr(const Expr& e);
  Flow render_nodes(const NodeList& nodes, std::string* out);
  JinjaValue lookup(const std::string& name) const;
  void assign(const std::string& name, JinjaValue v) { frames_.back()[name] = std::move(v); }
  Flow render_for(const Node& n, std::string* out);
  void render_set(const Node& n, JinjaValue v);
  JinjaValue make_macro(const Node& n);
  JinjaValue invoke_macro(const Node& n, JinjaArgs& args, const JinjaValue& caller);
  std::string render_to_string(const NodeList& body);
  void install_globals(const JinjaRenderOptions& options);

  // eval helpers (jinja_eval.cpp)
  JinjaValue eval_attr(const Expr& e);
  JinjaValue index(const JinjaValue& obj, const JinjaValue& key, int line);
  JinjaValue slice(const Expr& e);
  JinjaValue call(const Expr& e);
  JinjaValue binary(const Expr& e);
  JinjaArgs eval_args(const Expr& e, size_t first);

  std::vector<std::map<std::string, JinjaValue>> frames_;  // [0]: globals and context
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  int render_depth_ = 0;
  int64_t max_render_ms_;
  std::chrono::steady_clock::time_point deadline_;
  uint32_t clock_ticks_ = 0;
};

// Helpers shared by the renderer's files.
// ASCII letters to upper or lower case, other bytes unchanged (str.upper/lower on
// the ASCII range; non-ASCII characters are left as they are).
std::string ascii_case(std::string s, bool upper);
// UTF-8 text split into characters (Python iterates code points).
std::vector<std::string> utf8_chars(const std::string& s);
// Python's str.strip family: `chars` are single bytes or whole UTF-8 characters.
std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right);
inline const std::string kWhitespace = " \t\n\r\f\v";
// HTML escaping as jinja2's escape (& < > " ').
std::string escape_html(const std::string& s);
// str.replace(old, new[, count]).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1);
// The first `needle` in `hay` at or after byte `pos`, or npos, in time linear in
// both (std::string::find can take |hay| x |needle| steps).
size_t find_text(const std::string& hay, const std::string& needle, size_t pos = 0);
// Python's json.dumps(ensure_ascii=False, indent, sort_keys) as HF's tojson calls it.
std::string to_json_text(const JinjaValue& v, int indent, bool sort_keys, int line);
// Python's ordering of two values (numbers, strings, lists, tuples); fails as
// Python's `<` does for others ("'<' not supported between instances of ...").
int compare_values(const JinjaValue& a, const JinjaValue& b, int line);
// Python's sorted(items, key=..., reverse=...), keys[i] being the key of
// items[i]: stable, comparing keys with `<` only. Under 64 items it compares
// the pairs CPython's list.sort compares, in the same order, so a TypeError
// names the same two types jinja2's does.
void py_sort(JinjaList& items, JinjaList keys, bool reverse, int line);

}  // namespace sluice::jinja
