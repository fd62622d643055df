// Hostile templates: every limit of jinja_limits.h stops its attack quickly
// with kResourceExhausted naming the limit, and nothing crashes.
#include "server/jinja_limits.h"

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "server/jinja.h"

namespace sluice::server {
namespace {

Status render_status(const std::string& src) {
  auto t = JinjaTemplate::parse(src);
  if (!t.ok()) return t.status();
  auto out = t->render(nlohmann::ordered_json::object());
  return out.ok() ? Status() : out.status();
}

// Renders `src`, expecting a kResourceExhausted naming `limit` within a second.
void expect_limit(const std::string& src, const std::string& limit) {
  const auto start = std::chrono::steady_clock::now();
  const Status s = render_status(src);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << src.substr(0, 80) << ": " << s.to_string();
  EXPECT_NE(s.message().find(limit), std::string::npos) << s.to_string();
  EXPECT_LT(seconds, 5.0) << "took " << seconds << " s";
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

TEST(JinjaLimits, TemplateSize) {
  const Status s = render_status(std::string(jinja::kMaxTemplateBytes + 1, 'x'));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("kMaxTemplateBytes"), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
