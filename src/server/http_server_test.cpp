// HttpServer's lifecycle without an engine: a server shut down right after it
// starts (a model that fails to load at once) stops; its listener does not
// keep accepting.
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "base/metrics.h"
#include "server/http_server.h"

namespace sluice::server {
namespace {

TEST(HttpServerLifecycle, AShutdownRightAfterStartReturns) {
  // httplib's stop() before its accept loop runs did nothing: the join that
  // follows waited forever about one time in four (a server failing to load).
  for (int i = 0; i < 40; ++i) {
    // On a thread of its own, left behind if it hangs (the test fails, the process still ends).
    std::promise<bool> bound;
    std::future<bool> done = bound.get_future();
    std::thread([bound = std::move(bound)]() mutable {
      HttpServer http(ServerConfig{.port = 0, .http_threads = 2}, global_metrics());
      const bool ok = http.bind().ok();
      if (ok) {
        http.start();
        http.shutdown(0);
      }
      bound.set_value(ok);
    }).detach();
    ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "shutdown hung, round " << i;
    EXPECT_TRUE(done.get());
  }
}

}  // namespace
}  // namespace sluice::server
