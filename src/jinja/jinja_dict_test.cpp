// Dict literals with keys of every literal type (int, float, bool, none, str,
// tuple): the keys keep their type, are one key when Python says they are equal
// (1 == 1.0 == True), sort, print and serialize as Python does. Every expected
// string is what Python's jinja2 3.1 renders for the same template under Hugging
// Face's settings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, HF's tojson); errors carry the message of jinja2's exception.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "jinja/jinja_test_util.h"

#include "jinja/jinja.h"

namespace sluice::jinja {
namespace {

using ojson = nlohmann::ordered_json;

using testing::render;

// The render fails with kInvalidArgument carrying `message` (jinja2's, after the exception type).
void expect_error(const std::string& src, const std::string& message) {
  auto t = JinjaTemplate::parse(src);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto out = t->render(ojson::object());
  ASSERT_FALSE(out.ok()) << src << " rendered " << *out;
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status().to_string();
  EXPECT_NE(out.status().message().find(message), std::string::npos) << src << ": " << out.status().to_string();
}

// A chat template in the style of 2025 reasoning models: a dict literal with
// integer keys (thinking budgets), walked in key order by dictsort and compared
// with an integer. With keys turned into strings this failed every request
// ("'<' not supported between instances of 'int' and 'str'").
TEST(JinjaDict, IntegerKeyedTemplateRendersAsJinja2) {
  const std::string tmpl =
      "{%- set effort_by_budget = {32768: 'high', 1024: 'low', 8192: 'medium', 0: 'none'} -%}\n"
      "{%- set effort = namespace(name='none') -%}\n"
      "{%- for budget, name in effort_by_budget | dictsort -%}\n"
      "    {%- if (thinking_budget | default(0)) >= budget -%}{%- set effort.name = name -%}{%- endif -%}\n"
      "{%- endfor -%}\n"
      "{{- bos_token -}}\n"
      "{%- for message in messages -%}\n"
      "    {{- '<|' + message.role + '|>' + message.content + '<|end|>\\n' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}\n"
      "    {{- '<|assistant|><|effort:' + effort.name + '|>' -}}\n"
      "{%- endif -%}\n";
  const ojson messages = ojson::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Sum 2+2"}])");
  EXPECT_EQ(render(tmpl, {{"messages", messages}, {"add_generation_prompt", true}, {"thinking_budget", 9000},
                          {"bos_token", "<s>"}}),
            "<s><|system|>Be brief.<|end|>\n<|user|>Hi<|end|>\n<|assistant|>Hello.<|end|>\n<|user|>Sum 2+2<|end|>\n"
            "<|assistant|><|effort:medium|>");
  EXPECT_EQ(render(tmpl, {{"messages", ojson::array({messages[1]})}, {"add_generation_prompt", false}, {"bos_token", "<s>"}}),
            "<s><|user|>Hi<|end|>\n");
}

TEST(JinjaDict, KeysKeepTheirTypeAndPythonEquality) {
  EXPECT_EQ(render("{{ {1: 'a', 1.5: 'b', true: 'c', none: 'd', 'x': 'e', 2.0: 'f', -3: 'g'} }}"),
            "{1: 'c', 1.5: 'b', None: 'd', 'x': 'e', 2.0: 'f', -3: 'g'}");
  EXPECT_EQ(render("{{ {1: 'a', 1.0: 'b', true: 'c'} }}|{{ {0: 'a', false: 'b', 0.0: 'c'} | length }}|"
                   "{{ {1.0: 'x', -2: 'y', 1e20: 'z', false: 'f'} }}"),
            "{1: 'c'}|1|{1.0: 'x', -2: 'y', 1e+20: 'z', False: 'f'}");
  EXPECT_EQ(render("{% set d = {1: 'one', 2: 'two'} %}{{ d[1] }}|{{ d[1.0] }}|{{ d[true] }}|{{ d['1'] is defined }}|"
                   "{{ d.get(2) }}|{{ d.get('2', 'no') }}|{{ d.keys() | list }}|{{ d.values() | list }}"),
            "one|one|one|False|two|no|[1, 2]|['one', 'two']");
  EXPECT_EQ(render("{{ 1 in {1: 'a'} }}|{{ '1' in {1: 'a'} }}|{{ 1.0 in {1: 'a'} }}|{{ true in {1: 'a'} }}|"
                   "{{ none in {none: 1} }}|{{ (1, 2) in {(1, 2): 3} }}"),
            "True|False|True|True|True|True");
  EXPECT_EQ(render("{% for k in {3: 'x', 1: 'y'} %}{{ k + 1 }},{% endfor %}|"
                   "{% for k, v in {3: 'x', 1.5: 'y', none: 'z'}.items() %}{{ k }}:{{ v }};{% endfor %}"),
            "4,2,|3:x;1.5:y;None:z;");
  EXPECT_EQ(render("{{ {3: 'a', 1: 'b', 2.5: 'c'} | sort }}|{{ {3: 'a', 1: 'b'} | list }}|{{ {3: 'a', 1: 'b'} | first }}|"
                   "{{ dict({1: 'a'}, b=2) }}|{{ {1: 'a'} == {1.0: 'a'} }}|{{ {1: 'a'} == {'1': 'a'} }}"),
            "[1, 2.5, 3]|[3, 1]|3|{1: 'a', 'b': 2}|True|False");
  // Attribute paths look digits up as int keys, in dicts as in lists.
  EXPECT_EQ(render("{{ [{0: 'a'}, {0: 'b'}] | map(attribute='0') | list }}|"
                   "{{ [{1: 'x', 0: 'b'}, {1: 'y', 0: 'a'}] | sort(attribute='0') | map(attribute='1') | join }}"),
            "['a', 'b']|yx");
}

// As jinja2's lexer: "}}" inside an open brace closes braces, not the tag; a
// float literal may have an exponent.
TEST(JinjaDict, NestedDictLiteralsAndExponentsLex) {
  EXPECT_EQ(render("{{ {3: {4: 5}} }}|{{ 1e3 }}|{{ 2.5E-1 }}|{{ 1e+2 }}|{% if {1: 2} %}y{% endif %}"),
            "{3: {4: 5}}|1000.0|0.25|100.0|y");
}

TEST(JinjaDict, ItemsAndDictsort) {
  EXPECT_EQ(render("{{ {1: 'a', 2: 'b'} | items | list }}|{{ {none: 1, true: 2, 'k': 3} | items | list }}|"
                   "{{ {(1, 'a'): 2}[(1, 'a')] }}|{{ {(1, 'a'): 2} }}"),
            "[(1, 'a'), (2, 'b')]|[(None, 1), (True, 2), ('k', 3)]|2|{(1, 'a'): 2}");
  // Numbers sort as numbers (not "1" < "10" < "9"), bool and float among them.
  EXPECT_EQ(render("{{ {10: 'a', 9: 'b', 1: 'c', 100: 'd'} | dictsort }}|{{ {10: 'a', 9: 'b', 1: 'c'} | dictsort(reverse=true) }}|"
                   "{{ {2: 'b', 1: 'c', 3: 'a'} | dictsort(by='value') }}"),
            "[(1, 'c'), (9, 'b'), (10, 'a'), (100, 'd')]|[(10, 'a'), (9, 'b'), (1, 'c')]|[(3, 'a'), (2, 'b'), (1, 'c')]");
  EXPECT_EQ(render("{{ {2: 'a', 1.5: 'b', true: 'c', -1: 'd'} | dictsort }}|{{ {'b': 1, 'A': 2, 'a': 3} | dictsort }}|"
                   "{{ {'b': 1, 'A': 2, 'a': 3} | dictsort(true) }}|{{ {(2, 1): 'x', (1, 5): 'y'} | dictsort }}"),
            "[(-1, 'd'), (True, 'c'), (1.5, 'b'), (2, 'a')]|[('A', 2), ('a', 3), ('b', 1)]|[('A', 2), ('a', 3), ('b', 1)]|"
            "[((1, 5), 'y'), ((2, 1), 'x')]");
}

TEST(JinjaDict, ToJsonWritesKeysAsJsonDumps) {
  EXPECT_EQ(render("{{ {1: 'a', 2.5: none, true: [1], none: 'n', 'k': 'v', false: {3: 4}} | tojson }}"),
            R"({"1": [1], "2.5": null, "null": "n", "k": "v", "false": {"3": 4}})");
  EXPECT_EQ(render("{{ {10: 1, 9: 2, 1.5: 3, true: 4} | tojson(sort_keys=true) }}|"
                   "{{ {2: {1: 'x'}, 1: []} | tojson(indent=2, sort_keys=true) }}"),
            "{\"true\": 4, \"1.5\": 3, \"9\": 2, \"10\": 1}|{\n  \"1\": [],\n  \"2\": {\n    \"1\": \"x\"\n  }\n}");
  // A negative indent breaks lines without indenting, as json.dumps does.
  EXPECT_EQ(render("{{ [1, {'a': 2}] | tojson(indent=-3) }}"), "[\n1,\n{\n\"a\": 2\n}\n]");
}

// Where Python raises, the render fails with Python's message; for a sort of
// mixed types, naming the two types in the order CPython compared them.
TEST(JinjaDict, IncomparableOrUnhashableKeysFailAsInPython) {
  expect_error("{{ {1: 'a', 'b': 2} | dictsort }}", "'<' not supported between instances of 'str' and 'int'");
  expect_error("{{ {'b': 1, 'c': 2, 2: 2, 'a': 3, 1: 4} | dictsort }}",
               "'<' not supported between instances of 'int' and 'str'");
  expect_error("{{ {none: 1, 2: 2} | dictsort }}", "'<' not supported between instances of 'int' and 'NoneType'");
  expect_error("{{ {1: 'a', 'b': 2} | dictsort(reverse=true) }}", "'<' not supported between instances of 'int' and 'str'");
  expect_error("{{ {1: 1, 'a': 2} | tojson(sort_keys=true) }}", "'<' not supported between instances of 'str' and 'int'");
  expect_error("{{ [3, 'a'] | sort }}", "'<' not supported between instances of 'str' and 'int'");
  expect_error("{{ [(1, 'a'), (1, 2)] | sort }}", "'<' not supported between instances of 'int' and 'str'");
  expect_error("{{ {(1,): 1} | tojson }}", "keys must be str, int, float, bool or None, not tuple");
  expect_error("{{ {[1]: 2} }}", "unhashable type: 'list'");
  expect_error("{{ [1] in {1: 2} }}", "unhashable type: 'list'");
  expect_error("{% set d = {1: 'a'} %}{{ d[5] + 1 }}", "dict object has no element 5");
  expect_error("{{ {1: 'a'} | dictsort(by='size') }}", "You can only sort by either \"key\" or \"value\"");
}

}  // namespace
}  // namespace sluice::jinja
