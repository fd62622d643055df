// The Jinja subset: Python semantics that chat templates rely on, whitespace
// control as Hugging Face configures it, and clean refusals.
#include "jinja/jinja.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::jinja {
namespace {

// With nlohmann::json's context: object keys reach the template sorted.
std::string render_json(const std::string& src, const nlohmann::json& ctx = nlohmann::json::object()) {
  auto t = JinjaTemplate::parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().to_string();
  auto out = t->render(ctx);
  if (!out.ok()) return "RENDER ERROR: " + out.status().to_string();
  return *out;
}

TEST(Jinja, ExpressionsFollowPython) {
  EXPECT_EQ(render_json("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}"), "7|3|-4|2|3.5");
  EXPECT_EQ(render_json("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 2 }}|{{ [1, 2] + [3] }}"), "a1None|abab|[1, 2, 3]");
  EXPECT_EQ(render_json("{{ 0 == false }}|{{ 1 == 1.0 }}|{{ 'x' != false }}|{{ none is none }}"), "True|True|True|True");
  EXPECT_EQ(render_json("{{ 'b' in 'abc' }}|{{ 2 not in [1, 2] }}|{{ 'k' in {'k': 1} }}"), "True|False|True");
  EXPECT_EQ(render_json("{{ x or 'dflt' }}|{{ 'y' and 'z' }}|{{ 'yes' if 0 else 'no' }}"), "dflt|z|no");
  EXPECT_EQ(render_json("{{ s[1:] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ l[1:2] }}", {{"s", "héllo"}, {"l", {1, 2, 3}}}),
            "éllo|olléh|o|[2]");
}

TEST(Jinja, FiltersTestsAndMethods) {
  EXPECT_EQ(render_json("{{ '  a b  ' | trim }}|{{ 'ab' | upper }}|{{ [1, 2, 3] | length }}|{{ 'hello world' | title }}"),
            "a b|AB|3|Hello World");
  EXPECT_EQ(render_json("{{ d | tojson }}", {{"d", {{"b", 1}, {"a", {true, nullptr}}}}}), R"({"a": [true, null], "b": 1})");
  EXPECT_EQ(render_json("{{ ' x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'abc'.startswith('ab') }}|{{ 'x-y'.replace('-', '+') }}"),
            "x|['a', 'b']|True|x+y");
  EXPECT_EQ(render_json("{{ u is defined }}|{{ 3 is odd }}|{{ 'a' is string }}|{{ d is mapping }}|{{ x is not none }}",
                   {{"d", nlohmann::json::object()}, {"x", 1}}),
            "False|True|True|True|True");
  EXPECT_EQ(render_json("{{ d.get('k', 'no') }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}}}}),
            "no|a=1;");
  EXPECT_EQ(render_json("{{ u | default('dd') }}|{{ ['a', 'b'] | join('-') }}"), "dd|a-b");
}

TEST(Jinja, LoopsScopesAndNamespaces) {
  EXPECT_EQ(render_json("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", {{"xs", {"a", "b"}}}),
            "1a,2b");
  EXPECT_EQ(render_json("{% for x in [] %}y{% else %}empty{% endfor %}"), "empty");
  // set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(render_json("{% set v = 1 %}{% for i in range(3) %}{% set v = i %}{% endfor %}{{ v }}"), "1");
  EXPECT_EQ(render_json("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
}

TEST(Jinja, MacrosAndCaller) {
  EXPECT_EQ(render_json("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }}|{{ greet('b', '?') }}|{{ greet(name='c', punct='.') }}"),
            "Hi a!|Hi b?|Hi c.");
  EXPECT_EQ(render_json("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call wrap('b') %}bold{% endcall %}"),
            "<b>bold</b>");
  EXPECT_EQ(render_json("{% macro list(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(item) list([1, 2]) %}[{{ item }}]{% endcall %}"),
            "[1][2]");
}

TEST(Jinja, BlockSetFilterBlockAndLoopControls) {
  EXPECT_EQ(render_json("{% set block %}  text {{ 1 + 1 }}  {% endset %}[{{ block }}]|"
                   "{% set t | trim | upper %} ab {% endset %}{{ t }}"),
            "[  text 2  ]|AB");
  EXPECT_EQ(render_json("{% filter upper %}hello {{ 'x' }}{% endfilter %}"), "HELLO X");
  EXPECT_EQ(render_json("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "0134");
  EXPECT_EQ(render_json("{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] %}"
                   "{% endfor %}{{ ns.items }}"),
            "[0, 1, 2]");
}

TEST(Jinja, TheLoopObject) {
  EXPECT_EQ(render_json("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }};{% endfor %}",
                   {{"xs", {"p", "q", "r"}}}),
            "1032TrueFalse3a;2121FalseFalse3b;3210FalseTrue3a;");
  EXPECT_EQ(render_json("{% for x in xs %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }} "
                   "{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "-12 123 23- ");
  // A loop filter: loop.* counts the kept items only.
  EXPECT_EQ(render_json("{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }} {% else %}none{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "212 322 ");
}

TEST(Jinja, ExpressionsAsJinja2PrintsThem) {
  EXPECT_EQ(render_json("{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[-2:] }}|{{ l[::-1] }}|{{ l[1:3] }}|"
                   "{{ l[-1] }}|{{ l[5:] }}",
                   {{"s", "héllo"}, {"l", {1, 2, 3, 4}}}),
            "éllo|héll|olléh|hlo|lo|[4, 3, 2, 1]|[2, 3]|4|[]");
  EXPECT_EQ(render_json("{{ 'a' in 'cat' }}{{ 'z' not in 'cat' }}{{ 1 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}|"
                   "{{ 'a' ~ 1 ~ none ~ true }}|{{ 'y' if x else 'n' }}{{ 'y' if not x else 'n' }}|"
                   "{{ x is not defined }}",
                   {{"d", {{"k", 1}}}, {"x", 0}}),
            "TrueTrueTrueTrueTrue|a1NoneTrue|ny|False");
  EXPECT_EQ(render_json("{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|"
                   "{{ 2 ** -1 }}|{{ 1.5 + 1 }}|{{ 10 / 4 }}|{{ 'ab' * 3 }}|{{ [1] * 3 }}"),
            "5.0|3|-4|1|2|1024|0.5|2.5|2.5|ababab|[1, 1, 1]");
  EXPECT_EQ(render_json("{{ {'a': 1, 'b': [1, 'x']} }}|{{ [\"it's\", 'q\"'] }}|{{ none }}|{{ true }}|{{ 1.0 }}|{{ (1, 2) }}"),
            "{'a': 1, 'b': [1, 'x']}|[\"it's\", 'q\"']|None|True|1.0|(1, 2)");
}

TEST(Jinja, UndefinedValuesFailAsJinja2Does) {
  EXPECT_NE(render_json("{{ m.nope.x }}", {{"m", nlohmann::json::object()}}).find("'dict object' has no attribute 'nope'"),
            std::string::npos);
  EXPECT_NE(render_json("{{ nope + 1 }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_EQ(render_json("[{{ nope }}]{{ nope | length }}{% for x in nope %}x{% endfor %}{{ nope is iterable }}"), "[]0True");
}

TEST(Jinja, StrftimeNowReadsTheGivenClock) {
  auto t = JinjaTemplate::parse("{{ strftime_now('%d %b %Y %H:%M:%S') }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(nlohmann::ordered_json::object(), JinjaRenderOptions{.now_unix = 1767323045}),
            "02 Jan 2026 03:04:05");
}

TEST(Jinja, WhitespaceControlAndHfBlockTrimming) {
  // '-' strips on its side; trim_blocks eats the newline after a block tag;
  // lstrip_blocks eats indentation before one; one trailing newline is dropped.
  EXPECT_EQ(render_json("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render_json("{% if true %}\nyes\n{% endif %}\n"), "yes\n");
  EXPECT_EQ(render_json("x\n    {% if true %}\n  y\n    {% endif %}\nz"), "x\n  y\nz");
  EXPECT_EQ(render_json("{# comment #}k"), "k");
  EXPECT_EQ(render_json("{{ 'a\\nb' }}"), "a\nb");
  EXPECT_EQ(render_json("x\n  {%- if true -%}\n  y  \n  {%- endif %}\nz\n  {% if true %}\n    w\n  {% endif %}\nend\n"
                   "{# c #}\nk\n{{ 'v' }}\n{% for i in [1,2] +%}\n{{ i }}\n{% endfor %}\n"),
            "xyz\n    w\nend\nk\nv\n\n1\n\n2\n");
}

TEST(Jinja, ErrorsAreStatusesNamingTheProblem) {
  EXPECT_NE(render_json("{{ raise_exception('nope') }}").find("nope"), std::string::npos);
  EXPECT_NE(render_json("{{ x.y }}").find("undefined"), std::string::npos);
  EXPECT_NE(render_json("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(render_json("{% include 'x' %}").find("unsupported: "), std::string::npos);
  EXPECT_NE(render_json("{% for x in xs recursive %}{% endfor %}").find("recursive loop"), std::string::npos);
  EXPECT_NE(render_json("{% break %}").find("outside a loop"), std::string::npos);
  EXPECT_NE(render_json("{% macro m() %}{% endmacro %}{{ m(") .find("invalid argument"), std::string::npos);
  EXPECT_NE(render_json("{{ x | wordwrap }}").find("wordwrap"), std::string::npos);
  EXPECT_NE(render_json("{{ unknown_fn() }}").find("unknown_fn"), std::string::npos);
  EXPECT_NE(render_json("{{ 'unterminated }}").find("invalid argument: "), std::string::npos);
  EXPECT_NE(render_json("{% endfor %}").find("unexpected"), std::string::npos);
}

}  // namespace
}  // namespace sluice::jinja
