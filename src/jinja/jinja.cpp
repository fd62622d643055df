#include "jinja/jinja.h"

#include <algorithm>
#include <ctime>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "jinja/jinja_limits.h"
#include "jinja/jinja_render.h"

namespace sluice::jinja {

Renderer::Renderer(const nlohmann::ordered_json& context, const JinjaRenderOptions& options)
    : max_render_ms_(options.max_render_ms),
      deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(options.max_render_ms)) {
  frames_.emplace_back();
  install_globals(options);
  if (context.is_object())
    for (const auto& [k, v] : context.items()) frames_.back()[k] = JinjaValue::from_json(v);
}

void Renderer::install_globals(const JinjaRenderOptions& options) {
  auto& g = frames_.front();
  g["raise_exception"] = JinjaValue::function([](JinjaArgs& a) -> JinjaValue {
    throw JinjaError{StatusCode::kInvalidArgument, "chat template: " + a.get(0, "message").to_output()};
  });
  g["range"] = JinjaValue::function([this](JinjaArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].as_int();
    } else if (a.positional.size() >= 2) {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() >= 3) step = a.positional[2].as_int();
    }
    if (step == 0) fail(0, "range() step must not be zero");
    // In 128 bits: stop - start and -step may not fit in 64.
    const __int128 lo = start, hi = stop, st = step;
    const __int128 count = step > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
    const int64_t n = count > INT64_MAX ? INT64_MAX : static_cast<int64_t>(count);
    count_iterations(n, 0);
    JinjaList items;
    items.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) items.push_back(JinjaValue::integer(start + i * step));
    return JinjaValue::list(std::move(items));
  });
  auto make_dict = [this](JinjaArgs& a) {
    JinjaValue d = JinjaValue::dict();
    if (!a.positional.empty() && a.positional[0].is_dict()) {
      for (const auto& [k, v] : a.positional[0].entries()) {
        check_deadline(0);  // each set() scans the keys so far
        d.set(k, v);
      }
    }
    for (auto& [k, v] : a.keyword) d.set(k, v);
    return d;
  };
  g["namespace"] = JinjaValue::function(make_dict);
  g["dict"] = JinjaValue::function(make_dict);
  const std::optional<int64_t> now = options.now_unix;
  g["strftime_now"] = JinjaValue::function([now](JinjaArgs& a) {
    const std::time_t t = now ? static_cast<std::time_t>(*now) : std::time(nullptr);
    std::tm tm{};
    if (now) gmtime_r(&t, &tm);
    else localtime_r(&t, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.get(0, "format").to_output().c_str(), &tm);
    return JinjaValue::string(std::string(buf, n));
  });
}

JinjaValue Renderer::lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return JinjaValue::undefined("'" + name + "' is undefined");
}

void Renderer::count_iterations(int64_t n, int line) {
  check_deadline(line);
  iterations_ += n;
  if (n < 0 || iterations_ > kMaxLoopIterations)
    over_limit(line, "more than " + std::to_string(kMaxLoopIterations) + " loop iterations (limit kMaxLoopIterations)");
}

void Renderer::check_deadline(int line) {
  if (++clock_ticks_ % kRenderClockStride != 0 || std::chrono::steady_clock::now() < deadline_) return;
  over_limit(line, "rendering took longer than " + std::to_string(max_render_ms_) + " ms (limit kMaxRenderMillis)");
}

void Renderer::check_size(size_t bytes, int line) const {
  if (bytes > kMaxOutputBytes)
    over_limit(line, "output larger than " + std::to_string(kMaxOutputBytes) + " bytes (limit kMaxOutputBytes)");
}

void Renderer::undefined_error(const JinjaValue& v, int line) const {
  const std::string hint = v.undefined_hint();
  fail(line, hint.empty() ? "use of an undefined value" : hint);
}

Renderer::DepthGuard::DepthGuard(Renderer* r, int line) : r_(r) {
  r_->check_deadline(line);  // before counting the level: the destructor will not run if it throws
  if (++r_->render_depth_ > kMaxRenderDepth) {
    --r_->render_depth_;
    over_limit(line, "rendering nested more than " + std::to_string(kMaxRenderDepth) +
                         " levels deep (limit kMaxRenderDepth)");
  }
}

Renderer::Flow Renderer::render(const NodeList& nodes, std::string* out) {
  DepthGuard guard(this, nodes.empty() ? 0 : nodes.front()->line);
  return render_nodes(nodes, out);
}

Renderer::Flow Renderer::render_nodes(const NodeList& nodes, std::string* out) {
  for (const NodePtr& n : nodes) {
    switch (n->kind) {
      case Node::Kind::kText: *out += n->text; break;
      case Node::Kind::kOutput: *out += eval(*n->expr).to_output(); break;
      case Node::Kind::kIf: {
        const NodeList* body = &n->else_body;
        for (const auto& [cond, branch] : n->branches) {
          if (eval(*cond).truthy()) {
            body = &branch;
            break;
          }
        }
        const Flow f = render(*body, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case Node::Kind::kFor: {
        render_for(*n, out);
        break;
      }
      case Node::Kind::kSet: render_set(*n, eval(*n->expr)); break;
      case Node::Kind::kSetBlock: {
        JinjaValue v = JinjaValue::string(render_to_string(n->body));
        for (const ExprPtr& f : n->filters) {
          JinjaArgs a = eval_args(*f, 1);
          v = apply_filter(f->name, v, a, f->line);
        }
        render_set(*n, std::move(v));
        break;
      }
      case Node::Kind::kMacro: assign(n->text, make_macro(*n)); break;
      case Node::Kind::kCallBlock: {
        const Expr& call = *n->expr;
        JinjaValue fn = eval(*call.operands[0]);
        JinjaArgs args = eval_args(call, 1);
        const Node* block = n.get();
        args.keyword.emplace_back("caller", JinjaValue::function([this, block](JinjaArgs& a) {
          Node as_macro;
          as_macro.kind = Node::Kind::kMacro;
          as_macro.line = block->line;
          as_macro.text = "caller";
          as_macro.params = block->params;
          as_macro.body = block->body;
          return invoke_macro(as_macro, a, JinjaValue());
        }));
        *out += call_value(fn, args, call.line).to_output();
        break;
      }
      case Node::Kind::kFilterBlock: {
        JinjaValue v = JinjaValue::string(render_to_string(n->body));
        for (const ExprPtr& f : n->filters) {
          JinjaArgs a = eval_args(*f, 1);
          v = apply_filter(f->name, v, a, f->line);
        }
        *out += v.to_output();
        break;
      }
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
    }
    check_size(out->size(), n->line);
  }
  return Flow::kNormal;
}

std::string Renderer::render_to_string(const NodeList& body) {
  std::string s;
  render(body, &s);
  return s;
}

void Renderer::render_set(const Node& n, JinjaValue v) {
  if (n.attribute) {
    JinjaValue ns = lookup(n.targets[0]);
    if (!ns.is_dict()) fail(n.line, "'" + n.targets[0] + "' is not a namespace");
    check_acyclic(ns, v, n.line);
    ns.set(n.targets[1], std::move(v));
  } else if (n.targets.size() == 1) {
    assign(n.targets[0], std::move(v));
  } else {
    JinjaList items = iterate(v, n.line);
    if (items.size() != n.targets.size())
      fail(n.line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                       std::to_string(n.targets.size()) + " names");
    for (size_t i = 0; i < items.size(); ++i) assign(n.targets[i], items[i]);
  }
}

Renderer::Flow Renderer::render_for(const Node& n, std::string* out) {
  JinjaList items = iterate(eval(*n.expr), n.line);
  auto bind = [&](std::map<std::string, JinjaValue>& f, const JinjaValue& item) {
    if (n.targets.size() == 1) {
      f[n.targets[0]] = item;
      return;
    }
    JinjaList parts = iterate(item, n.line);
    if (parts.size() != n.targets.size())
      fail(n.line, "cannot unpack a loop item into " + std::to_string(n.targets.size()) + " variables");
    for (size_t t = 0; t < n.targets.size(); ++t) f[n.targets[t]] = parts[t];
  };
  if (n.condition) {  // `for x in xs if cond`: loop.* counts only the items kept
    JinjaList kept;
    for (const JinjaValue& item : items) {
      count_iterations(1, n.line);
      frames_.emplace_back();
      bind(frames_.back(), item);
      const bool keep = eval(*n.condition).truthy();
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    render(n.else_body, out);
    return Flow::kNormal;
  }
  // A new loop object each iteration. One updated in place, as jinja2's
  // LoopContext is, could come to hold (as previtem or nextitem) a value that
  // holds it: a cycle made without an assignment to check (check_acyclic).
  const int64_t len = static_cast<int64_t>(items.size());
  JinjaList keys;
  for (const char* name : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem",
                           "length", "depth", "depth0", "cycle"})
    keys.push_back(JinjaValue::string(name));
  auto index = std::make_shared<int64_t>(0);
  const JinjaValue cycle = JinjaValue::function([index, line = n.line](JinjaArgs& a) {
    if (a.positional.empty()) fail(line, "loop.cycle() needs at least one item");
    return a.positional[static_cast<size_t>(*index) % a.positional.size()];
  });
  for (int64_t i = 0; i < len; ++i) {
    count_iterations(1, n.line);
    frames_.emplace_back();
    auto& f = frames_.back();
    bind(f, items[static_cast<size_t>(i)]);
    *index = i;
    const JinjaValue values[] = {
        JinjaValue::integer(i + 1), JinjaValue::integer(i), JinjaValue::integer(len - i),
        JinjaValue::integer(len - i - 1), JinjaValue::boolean(i == 0), JinjaValue::boolean(i == len - 1),
        i > 0 ? items[static_cast<size_t>(i - 1)] : JinjaValue::undefined("there is no previous item"),
        i + 1 < len ? items[static_cast<size_t>(i + 1)] : JinjaValue::undefined("there is no next item"),
        JinjaValue::integer(len), JinjaValue::integer(1), JinjaValue::integer(0), cycle};
    JinjaDict fields;
    fields.reserve(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) fields.emplace_back(keys[k], values[k]);
    const JinjaValue loop = JinjaValue::dict(std::move(fields));
    f["loop"] = loop;
    const Flow flow = render(n.body, out);
    frames_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

JinjaValue Renderer::make_macro(const Node& n) {
  const Node* node = &n;
  return JinjaValue::function([this, node](JinjaArgs& a) {
    JinjaValue caller;
    for (auto it = a.keyword.begin(); it != a.keyword.end(); ++it) {
      if (it->first == "caller") {
        caller = it->second;
        a.keyword.erase(it);
        break;
      }
    }
    return invoke_macro(*node, a, caller);
  });
}

// Binds parameters (positional, then by keyword, then defaults; missing ones are
// undefined), extra positional arguments to `varargs` and extra keyword
// arguments to `kwargs`, and renders the body to a string.
JinjaValue Renderer::invoke_macro(const Node& n, JinjaArgs& a, const JinjaValue& caller) {
  if (call_depth_ >= kMaxCallDepth)
    over_limit(n.line, "macro '" + n.text + "' nested more than " + std::to_string(kMaxCallDepth) +
                           " calls deep (limit kMaxCallDepth)");
  ++call_depth_;
  frames_.emplace_back();
  JinjaList varargs;
  JinjaValue kwargs = JinjaValue::dict();
  for (size_t i = n.params.size(); i < a.positional.size(); ++i) varargs.push_back(a.positional[i]);
  for (const auto& [k, v] : a.keyword) {
    const bool is_param =
        std::any_of(n.params.begin(), n.params.end(), [&k = k](const Param& p) { return p.name == k; });
    if (!is_param) kwargs.set(k, v);
  }
  for (size_t i = 0; i < n.params.size(); ++i) {
    const Param& p = n.params[i];
    JinjaValue v = JinjaValue::undefined("parameter '" + p.name + "' of macro '" + n.text + "' was not given");
    bool given = false;
    if (i < a.positional.size()) {
      v = a.positional[i];
      given = true;
    }
    for (const auto& [k, kv] : a.keyword) {
      if (k == p.name) {
        v = kv;
        given = true;
      }
    }
    if (!given && p.dflt) v = eval(*p.dflt);
    assign(p.name, std::move(v));
  }
  assign("varargs", JinjaValue::tuple(std::move(varargs)));
  assign("kwargs", std::move(kwargs));
  if (!caller.is_undefined()) assign("caller", caller);
  std::string out;
  render(n.body, &out);
  frames_.pop_back();
  --call_depth_;
  return JinjaValue::string(std::move(out));
}

void Renderer::check_acyclic(const JinjaValue& container, const JinjaValue& v, int line) {
  const void* target = container.container();
  if (!target || !v.container()) return;
  std::vector<JinjaValue> stack = {v};  // the containers v reaches, each visited once
  std::unordered_set<const void*> seen;
  while (!stack.empty()) {
    const JinjaValue x = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(x.container()).second) continue;
    if (x.container() == target)
      fail(line, std::string("this would make a ") + container.type_name() +
                     " contain itself; sluice does not support cyclic values");
    check_deadline(line);
    if (x.is_list()) {
      for (const JinjaValue& e : x.items())
        if (e.container()) stack.push_back(e);
    } else {
      for (const auto& [k, e] : x.entries())  // keys are hashable: no list or dict in them
        if (e.container()) stack.push_back(e);
    }
  }
}

JinjaList Renderer::iterate(const JinjaValue& v, int line) {
  if (v.is_list()) return v.items();
  if (v.is_undefined()) return {};
  if (v.is_dict()) {
    JinjaList keys;
    for (const auto& [k, e] : v.entries()) keys.push_back(k);
    return keys;
  }
  if (v.is_string()) {
    JinjaList chars;
    for (auto& c : utf8_chars(v.as_string())) chars.push_back(JinjaValue::string(std::move(c)));
    return chars;
  }
  fail(line, std::string("'") + v.type_name() + "' object is not iterable");
}

StatusOr<JinjaTemplate> JinjaTemplate::parse(std::string_view source) {
  ASSIGN_OR_RETURN(jinja::NodeList nodes, jinja::parse_template(source));
  return JinjaTemplate(std::move(nodes));
}

StatusOr<std::string> JinjaTemplate::render(const nlohmann::ordered_json& context,
                                            const JinjaRenderOptions& options) const {
  try {
    jinja::Renderer r(context, options);
    std::string out;
    r.render(nodes_, &out);
    return out;
  } catch (const jinja::JinjaError& e) {
    return Status(e.code, e.message);
  }
}

}  // namespace sluice::jinja
