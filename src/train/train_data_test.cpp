#include "train/train_data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "base/test_data.h"
#include "train/train_test_data.h"
#include "format/gguf_reader.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {



std::unique_ptr<Tokenizer> tokenizer() {
  auto mf = read_gguf(testing::kFinetuneBase);
  EXPECT_TRUE(mf.ok());
  auto t = Tokenizer::from_metadata(mf->metadata);
  EXPECT_TRUE(t.ok());
  return std::move(*t);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string p = ::testing::TempDir() + name;
  std::ofstream(p) << text;
  return p;
}

TEST(TrainData, PlainTextIsCutIntoOverlappingWindows) {
  auto tok = tokenizer();
  const std::string text = "Once upon a time there was a little dog. The dog liked to run in the park every day.";
  const std::string p = write_temp("td_plain.txt", text);
  auto d = load_train_data(p, {.seq = 8, .tokenizer = tok.get()});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const std::vector<int32_t> ids = tok->encode(text, true);
  ASSERT_GT(ids.size(), 9u);
  EXPECT_EQ(d->kind, "text");
  // Window i: inputs ids[8i .. 8i+7], targets ids[8i+1 .. 8i+8]; the last one shorter.
  ASSERT_EQ(d->examples.size(), (ids.size() - 1 + 7) / 8);
  for (size_t w = 0; w < d->examples.size(); ++w) {
    const TrainExample& ex = d->examples[w];
    for (size_t i = 0; i < ex.tokens.size(); ++i) {
      EXPECT_EQ(ex.tokens[i], ids[8 * w + i]);
      EXPECT_EQ(ex.targets[i], ids[8 * w + i + 1]);
    }
  }
  EXPECT_EQ(d->n_counted, static_cast<int64_t>(ids.size()) - 1);
  std::remove(p.c_str());
}

TEST(TrainData, ChatCountsOnlyTheAssistantsTokens) {
  auto tok = tokenizer();
  auto chat = server::ChatTemplate::create(
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:"
      "{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  const std::string p = write_temp(
      "td_chat.jsonl",
      R"({"messages": [{"role": "user", "content": "Tell me about the cat."}, {"role": "assistant", "content": " The cat sat on the mat."}]})"
      "\n\n"
      R"({"text": "A plain story line."})"
      "\n");
  auto d = load_train_data(p, {.seq = 256, .tokenizer = tok.get(), .chat = &*chat});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, "chat and text");
  ASSERT_EQ(d->examples.size(), 2u);
  std::vector<int32_t> counted;
  for (int32_t t : d->examples[0].targets) {
    if (t >= 0) counted.push_back(t);
  }
  const std::string learned = tok->decode(counted);
  EXPECT_NE(learned.find("cat sat on the mat"), std::string::npos) << learned;
  EXPECT_EQ(learned.find("Tell me"), std::string::npos) << learned;
  EXPECT_EQ(learned.find("user"), std::string::npos) << learned;
  // The plain line: every position counts.
  for (int32_t t : d->examples[1].targets) EXPECT_GE(t, 0);
  std::remove(p.c_str());
}

TEST(TrainData, BadFilesAreRefusedByName) {
  auto tok = tokenizer();
  const std::string bad = write_temp("td_bad.jsonl", "{\"text\": \"ok\"}\n{not json\n");
  auto d = load_train_data(bad, {.seq = 16, .tokenizer = tok.get()});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().to_string().find("line 2"), std::string::npos) << d.status().to_string();
  const std::string chat = write_temp("td_nochat.jsonl", R"({"messages": [{"role": "user", "content": "hi"}]})");
  d = load_train_data(chat, {.seq = 16, .tokenizer = tok.get()});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().to_string().find("chat template"), std::string::npos) << d.status().to_string();
  d = load_train_data(::testing::TempDir() + "does_not_exist.txt", {.seq = 16, .tokenizer = tok.get()});
  EXPECT_FALSE(d.ok());
  std::remove(bad.c_str());
  std::remove(chat.c_str());
}

TEST(TrainData, HeldOutSplitTakesEveryKthExample) {
  TrainData d;
  for (int i = 0; i < 10; ++i) d.examples.push_back({{i, i}, {i + 1, -1}});
  auto held = split_heldout(d, 0.25);  // every 4th
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->examples.size(), 2u);
  EXPECT_EQ(d.examples.size(), 8u);
  EXPECT_EQ(held->examples[0].tokens[0], 3);
  EXPECT_EQ(d.n_counted, 8);
  EXPECT_FALSE(split_heldout(d, 0.9).ok());
}

}  // namespace
}  // namespace sluice
