// The Jinja subset: Python semantics that chat templates rely on, whitespace
// control as Hugging Face configures it, and clean refusals.
#include "server/jinja.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

std::string render(const std::string& src, const nlohmann::json& ctx = nlohmann::json::object()) {
  auto t = JinjaTemplate::parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().to_string();
  auto out = t->render(ctx);
  if (!out.ok()) return "RENDER ERROR: " + out.status().to_string();
  return *out;
}

TEST(Jinja, ExpressionsFollowPython) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}"), "7|3|-4|2|3.5");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 2 }}|{{ [1, 2] + [3] }}"), "a1None|abab|[1, 2, 3]");
  EXPECT_EQ(render("{{ 0 == false }}|{{ 1 == 1.0 }}|{{ 'x' != false }}|{{ none is none }}"), "True|True|True|True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}|{{ 2 not in [1, 2] }}|{{ 'k' in {'k': 1} }}"), "True|False|True");
  EXPECT_EQ(render("{{ x or 'dflt' }}|{{ 'y' and 'z' }}|{{ 'yes' if 0 else 'no' }}"), "dflt|z|no");
  EXPECT_EQ(render("{{ s[1:] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ l[1:2] }}", {{"s", "héllo"}, {"l", {1, 2, 3}}}),
            "éllo|olléh|o|[2]");
}

TEST(Jinja, FiltersTestsAndMethods) {
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ 'ab' | upper }}|{{ [1, 2, 3] | length }}|{{ 'hello world' | title }}"),
            "a b|AB|3|Hello World");
  EXPECT_EQ(render("{{ d | tojson }}", {{"d", {{"b", 1}, {"a", {true, nullptr}}}}}), R"({"a": [true, null], "b": 1})");
  EXPECT_EQ(render("{{ ' x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'abc'.startswith('ab') }}|{{ 'x-y'.replace('-', '+') }}"),
            "x|['a', 'b']|True|x+y");
  EXPECT_EQ(render("{{ u is defined }}|{{ 3 is odd }}|{{ 'a' is string }}|{{ d is mapping }}|{{ x is not none }}",
                   {{"d", nlohmann::json::object()}, {"x", 1}}),
            "False|True|True|True|True");
  EXPECT_EQ(render("{{ d.get('k', 'no') }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}}}}),
            "no|a=1;");
  EXPECT_EQ(render("{{ u | default('dd') }}|{{ ['a', 'b'] | join('-') }}"), "dd|a-b");
}

TEST(Jinja, LoopsScopesAndNamespaces) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", {{"xs", {"a", "b"}}}),
            "1a,2b");
  EXPECT_EQ(render("{% for x in [] %}y{% else %}empty{% endfor %}"), "empty");
  // set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(render("{% set v = 1 %}{% for i in range(3) %}{% set v = i %}{% endfor %}{{ v }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
}

TEST(Jinja, WhitespaceControlAndHfBlockTrimming) {
  // '-' strips on its side; trim_blocks eats the newline after a block tag;
  // lstrip_blocks eats indentation before one; one trailing newline is dropped.
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\n"), "yes\n");
  EXPECT_EQ(render("x\n    {% if true %}\n  y\n    {% endif %}\nz"), "x\n  y\nz");
  EXPECT_EQ(render("{# comment #}k"), "k");
  EXPECT_EQ(render("{{ 'a\\nb' }}"), "a\nb");
}

TEST(Jinja, ErrorsAreStatusesNamingTheProblem) {
  EXPECT_NE(render("{{ raise_exception('nope') }}").find("nope"), std::string::npos);
  EXPECT_NE(render("{{ x.y }}").find("undefined"), std::string::npos);
  EXPECT_NE(render("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(render("{% include 'x' %}").find("unsupported: "), std::string::npos);
  EXPECT_NE(render("{% for x in xs if x %}{% endfor %}").find("loop filter"), std::string::npos);
  EXPECT_NE(render("{{ x | wordwrap }}").find("wordwrap"), std::string::npos);
  EXPECT_NE(render("{{ unknown_fn() }}").find("unknown_fn"), std::string::npos);
  EXPECT_NE(render("{{ 'unterminated }}").find("invalid argument: "), std::string::npos);
  EXPECT_NE(render("{% endfor %}").find("unexpected"), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
