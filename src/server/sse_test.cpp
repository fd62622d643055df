// SSE framing: what the server writes is what a client parser reads back.
#include "server/sse.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::server {
namespace {

TEST(Sse, FramesOneEventPerPayload) {
  EXPECT_EQ(sse_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_data("two\nlines"), "data: two\ndata: lines\n\n");
  EXPECT_EQ(sse_comment("keep-alive"), ": keep-alive\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  EXPECT_EQ(sse_json(nlohmann::json{{"t", "x\ny"}}), "data: {\"t\":\"x\\ny\"}\n\n");
}

TEST(Sse, InvalidUtf8IsReplacedNotThrown) {
  const std::string half = "\xE2\x96";  // the first two bytes of a three-byte character
  const std::string out = sse_json(nlohmann::json{{"t", half}});
  EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos) << out;
}

TEST(Sse, ParserRoundTripsSplitAtEveryByte) {
  const std::string stream = sse_json({{"i", 0}}) + sse_comment("keep-alive") + sse_data("multi\nline") +
                             sse_json({{"i", 1}}) + std::string(kSseDone);
  for (size_t split = 0; split <= stream.size(); ++split) {
    SseParser p;
    p.feed(std::string_view(stream).substr(0, split));
    p.feed(std::string_view(stream).substr(split));
    const auto events = p.take_events();
    ASSERT_EQ(events.size(), 4u) << "split at " << split;
    EXPECT_EQ(events[0], "{\"i\":0}");
    EXPECT_EQ(events[1], "multi\nline");
    EXPECT_EQ(events[2], "{\"i\":1}");
    EXPECT_EQ(events[3], "[DONE]");
    EXPECT_EQ(p.pending_bytes(), 0u);
  }
}

TEST(Sse, ParserAcceptsCrlfAndHoldsPartialEvents) {
  SseParser p;
  p.feed("data: a\r\n\r\ndata: b");
  auto ev = p.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], "a");
  EXPECT_GT(p.pending_bytes(), 0u);
  p.feed("\n\n");
  ev = p.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], "b");
}

}  // namespace
}  // namespace sluice::server
