// Hostile templates: every limit of jinja_limits.h stops its attack quickly
// with kResourceExhausted naming the limit, and nothing crashes.
#include "jinja/jinja_limits.h"

#include <time.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "jinja/jinja.h"

namespace sluice::jinja {
namespace {

// Each test checks one limit: the wall-clock one is set out of reach (but the
// one it tests), so that a loaded machine does not hit it first.
constexpr JinjaRenderOptions kNoClock{.max_render_ms = 600'000};

Status render_status(const std::string& src, const JinjaRenderOptions& options = kNoClock) {
  auto t = JinjaTemplate::parse(src);
  if (!t.ok()) return t.status();
  auto out = t->render(nlohmann::ordered_json::object(), options);
  return out.ok() ? Status() : out.status();
}

// This thread's CPU time: what a render costs, whatever else loads the machine.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Renders `src`, expecting a kResourceExhausted naming `limit` within seconds
// of CPU time (the render is single-threaded; wall time would measure the load).
void expect_limit(const std::string& src, const std::string& limit, const JinjaRenderOptions& options = kNoClock) {
  const double start = thread_cpu_seconds();
  const Status s = render_status(src, options);
  const double seconds = thread_cpu_seconds() - start;
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << src.substr(0, 80) << ": " << s.to_string();
  EXPECT_NE(s.message().find(limit), std::string::npos) << s.to_string();
  EXPECT_LT(seconds, 5.0) << "took " << seconds << " s of CPU time";
}

TEST(JinjaLimits, LoopIterations) {
  expect_limit("{% for i in range(1000000000) %}{% endfor %}", "kMaxLoopIterations");
  expect_limit("{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}", "kMaxLoopIterations");
  // Within the limit is fine (range's items count as well as the loop's iterations).
  EXPECT_TRUE(render_status("{% for i in range(" + std::to_string(jinja::kMaxLoopIterations / 2) + ") %}{% endfor %}").ok());
}

TEST(JinjaLimits, OutputBytes) {
  expect_limit("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", "kMaxOutputBytes");
  expect_limit("{{ 'x' * 1000000000000 }}", "kMaxOutputBytes");
  expect_limit("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "kMaxOutputBytes");
  expect_limit("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "kMaxOutputBytes");
  expect_limit("{{ ('x\\n' * 500000) | indent(1000) }}", "kMaxOutputBytes");
}

TEST(JinjaLimits, MacroRecursion) {
  expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "kMaxCallDepth");
  // Bounded recursion well inside the limit works.
  auto t = JinjaTemplate::parse("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(nlohmann::ordered_json::object()), "54321");
}

TEST(JinjaLimits, DeepExpressionsTimesMacroCalls) {
  // Each call nests a 150-level expression before recursing: within the parse
  // and call limits, but their product is what the stack would pay.
  std::string deep = "f(n + 1)";
  for (int i = 0; i < 150; ++i) deep = "(" + deep + " ~ '')";
  expect_limit("{% macro f(n) %}{% if n < 60 %}{{ " + deep + " }}{% endif %}{% endmacro %}{{ f(0) }}",
               "kMaxRenderDepth");
}

TEST(JinjaLimits, ParseNesting) {
  const int n = 100000;
  expect_limit("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}", "kMaxParseDepth");
  std::string chain = "{{ 1";
  for (int i = 0; i < n / 2; ++i) chain += " + 1";  // 650 KB, under kMaxTemplateBytes
  expect_limit(chain + " }}", "kMaxParseDepth");
  std::string ifs;
  for (int i = 0; i < n / 10; ++i) ifs += "{% if true %}";
  expect_limit(ifs, "kMaxParseDepth");
  expect_limit("{{ " + std::string(n, '[') + std::string(n, ']') + " }}", "kMaxParseDepth");
  std::string filters = "{{ x";
  for (int i = 0; i < 1000; ++i) filters += " | trim";
  expect_limit(filters + " }}", "kMaxParseDepth");
}

TEST(JinjaLimits, RenderTime) {
  // 400,000 iterations (within kMaxLoopIterations) that each build a string of
  // a million bytes (within kMaxOutputBytes): tens of seconds without a clock.
  // (The server's limit is kMaxRenderMillis; ChatTemplateServe checks that one.)
  const JinjaRenderOptions limit{.max_render_ms = 300};
  const auto start = std::chrono::steady_clock::now();
  expect_limit("{% for i in range(400000) %}{% set s = 'x' * 1000000 %}{% endfor %}", "kMaxRenderMillis", limit);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 0.3 + 1.0);
  EXPECT_TRUE(render_status("{% for i in range(1000) %}{% set s = 'x' * 1000 %}{% endfor %}", limit).ok());
}

// Text operations take time linear in their texts, so one step of a render
// stays short whatever its arguments (std::string::find is |text| x |pattern|).
TEST(JinjaLimits, TextOperationsOnLongTextsAreLinear) {
  auto fast = [](const std::string& src, const std::string& want) {
    const auto start = std::chrono::steady_clock::now();
    auto t = JinjaTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto out = t->render(nlohmann::ordered_json::object(), kNoClock);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, want) << src;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0) << src;
  };
  fast("{{ ('a' * 500000) | replace('a', 'bb') | length }}", "1000000");
  fast("{% set h = 'a' * 1000000 %}{% set n = 'a' * 500000 + 'b' %}{{ h.count(n) }}|{{ h.find(n) }}|{{ h.rfind(n) }}|"
       "{{ h.split(n) | length }}|{{ h.rsplit(n) | length }}|{{ n in h }}",
       "0|-1|-1|1|1|False");
  fast("{{ ('x' * 1000000) | trim('y' * 1000000 + 'x') | length }}", "0");
}

// Lists and dicts are shared, so a small template can make a value whose text
// or JSON would be enormous, or a value nested 100,000 deep: both fail (or are
// released) cleanly; and no value may contain itself.
TEST(JinjaLimits, SharedNestedAndCyclicValues) {
  const std::string huge = "{% set s = 'x' * 1000000 %}{% set a = [s] * 1000 %}{% set b = [a] * 1000 %}";
  expect_limit(huge + "{{ b }}", "kMaxOutputBytes");
  expect_limit(huge + "{{ b | tojson }}", "kMaxOutputBytes");
  expect_limit(huge + "{{ b | string | length }}", "kMaxOutputBytes");
  auto t = JinjaTemplate::parse(huge + "{{ b == b }}|{{ [b, a] == [b, a] }}|{{ b | unique | list | length }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(nlohmann::ordered_json::object(), kNoClock), "True|True|1");

  // A chain [[[...]]] 2,000 deep is too deep to print, compare or serialize;
  // one 100,000 deep is released without a recursion per level (which would
  // overflow the stack).
  auto chain = [](int depth) {
    return "{% set root = [] %}{% set ns = namespace(cur=root) %}{% for i in range(" + std::to_string(depth) +
           ") %}{% set next = [] %}{% if ns.cur.append(next) %}{% endif %}{% set ns.cur = next %}{% endfor %}";
  };
  expect_limit(chain(2000) + "{{ root }}", "kMaxRenderDepth");
  expect_limit(chain(2000) + "{{ root == [root] }}", "kMaxRenderDepth");
  expect_limit(chain(2000) + "{{ root | tojson }}", "tojson of a value nested too deep");
  auto deep = JinjaTemplate::parse(chain(100000) + "{{ root | length }}");
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(*deep->render(nlohmann::ordered_json::object(), kNoClock), "1");

  for (const char* cyclic : {"{% set l = [] %}{% if l.append(l) %}{% endif %}",
                             "{% set a = [] %}{% set b = [[a]] %}{% if a.extend(b) %}{% endif %}",
                             "{% set ns = namespace(x=1) %}{% set ns.me = ns %}",
                             "{% set ns = namespace(l=[]) %}{% if ns.l.append({'n': ns}) %}{% endif %}"}) {
    const Status s = render_status(cyclic);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << cyclic << ": " << s.to_string();
    EXPECT_NE(s.message().find("contain itself"), std::string::npos) << s.to_string();
  }
}

TEST(JinjaLimits, TemplateSize) {
  const Status s = render_status(std::string(jinja::kMaxTemplateBytes + 1, 'x'));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("kMaxTemplateBytes"), std::string::npos);
}

}  // namespace
}  // namespace sluice::jinja
