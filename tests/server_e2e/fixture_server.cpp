// sluice_fixture_server: the real HTTP server and request path (HttpServer,
// request parsing and validation, the chat template, tokenization, tool-call
// parsing, both response writers) in front of a stand-in for the model that
// "generates" a fixed text: every output of every request is the fixture
// file's text, a few UTF-8 characters per token event, then a stop (or
// length, at max_tokens events). Test-only (tests/server_e2e/tool_calls.mjs
// uses it to show tool-call parsing through the OpenAI SDK for model outputs
// no small test model writes); `sluice serve` has no such mode.
//
//   sluice_fixture_server --tokenizer MODEL.gguf --chat-template FILE --output FIXTURE.txt
//                         [--port 0] [--tool-call-format auto|none|llama3|hermes|mistral|deepseek]
// Prints "listening on http://127.0.0.1:PORT" on stderr; SIGTERM or SIGINT stops it.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/metrics.h"
#include "format/gguf_reader.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

// UTF-8 pieces of at most `chars` characters each.
std::vector<std::string> split_utf8(const std::string& text, int chars) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    for (int c = 0; c < chars && j < text.size(); ++c) {
      ++j;
      while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    }
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

class FixtureService final : public server::GenerationService {
 public:
  FixtureService(std::unique_ptr<Tokenizer> tok, std::string output) : tok_(std::move(tok)), pieces_(split_utf8(output, 3)) {
    for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
      if (!tok_->is_eog(id) && id != tok_->bos_id()) {
        token_ = id;
        break;
      }
    }
  }
  ~FixtureService() override { drain(0); }

  StatusOr<RequestId> submit(Request request, EventCallback on_event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) return resource_exhausted("the fixture server is draining");
    const RequestId id = next_id_++;
    auto aborted = std::make_shared<std::atomic<bool>>(false);
    aborted_[id] = aborted;
    threads_.emplace_back([this, id, aborted, r = std::move(request), cb = std::move(on_event)] {
      const auto t0 = std::chrono::steady_clock::now();
      int64_t n_generated = 0;
      for (int32_t index = 0; index < r.n; ++index) {
        int32_t n = 0;
        FinishReason reason = FinishReason::kStop;
        for (const std::string& piece : pieces_) {
          if (aborted->load()) {
            reason = FinishReason::kAbort;
            break;
          }
          if (n == r.max_tokens) {
            reason = FinishReason::kLength;
            break;
          }
          cb(TokenEvent{.request = id, .index = index, .token = token_, .text = piece});
          ++n;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        n_generated += n;
        TokenEvent last{.request = id, .index = index, .finished = true, .finish_reason = reason};
        if (index == r.n - 1) {
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          last.timings = RequestTimings{.e2e_s = s, .n_prompt = static_cast<int64_t>(r.prompt.size()),
                                        .n_generated = n_generated};
        }
        cb(last);
      }
    });
    return id;
  }
  void abort(RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = aborted_.find(id); it != aborted_.end()) it->second->store(true);
  }
  bool drain(double) override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      draining_ = true;
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    return true;
  }
  const Tokenizer& tokenizer() const override { return *tok_; }
  const std::string& model_name() const override { return name_; }
  int64_t ctx_size() const override { return 4096; }

 private:
  std::unique_ptr<Tokenizer> tok_;
  std::vector<std::string> pieces_;
  int32_t token_ = 0;
  std::string name_ = "fixture";
  std::mutex mu_;
  bool draining_ = false;
  RequestId next_id_ = 1;
  std::map<RequestId, std::shared_ptr<std::atomic<bool>>> aborted_;
  std::vector<std::thread> threads_;
};

int run(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"--port", "0"}, {"--tool-call-format", "auto"}};
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  for (const char* required : {"--tokenizer", "--chat-template", "--output"}) {
    if (!args.count(required)) {
      fmt::print(stderr, "usage: {} --tokenizer MODEL.gguf --chat-template FILE --output FIXTURE.txt [--port N] "
                         "[--tool-call-format F]\n", argv[0]);
      return 2;
    }
  }
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto model = read_gguf(args["--tokenizer"]);
  if (!model.ok()) return fmt::print(stderr, "{}\n", model.status().to_string()), 1;
  auto tok = Tokenizer::from_metadata(model->metadata);
  if (!tok.ok()) return fmt::print(stderr, "{}\n", tok.status().to_string()), 1;
  std::ifstream in(args["--output"], std::ios::binary);
  if (!in) return fmt::print(stderr, "cannot open {}\n", args["--output"]), 1;
  std::ostringstream text;
  text << in.rdbuf();
  const Tokenizer& t = **tok;
  auto chat = server::ChatTemplate::from_file(args["--chat-template"], t.bos_id() >= 0 ? t.token_text(t.bos_id()) : "",
                                              t.eos_id() >= 0 ? t.token_text(t.eos_id()) : "");
  if (!chat.ok()) return fmt::print(stderr, "{}\n", chat.status().to_string()), 1;

  server::ServerConfig config{.port = std::stoi(args["--port"]), .http_threads = 16,
                              .tool_call_format = args["--tool-call-format"]};
  MetricRegistry metrics;
  server::HttpServer http(config, metrics);
  if (Status st = http.bind(); !st.ok()) return fmt::print(stderr, "{}\n", st.to_string()), 1;
  http.start();
  Status st = http.set_service(std::make_shared<FixtureService>(std::move(tok).value(), text.str()),
                               std::move(chat).value());
  if (!st.ok()) {
    http.shutdown(0);
    return fmt::print(stderr, "{}\n", st.to_string()), 1;
  }
  fmt::print(stderr, "listening on http://127.0.0.1:{} (tool calls: {})\n", http.port(),
             server::tool_call_format_name(http.tool_call_format()));
  int sig = 0;
  sigwait(&stop_set, &sig);
  http.shutdown(5);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::run(argc, argv); }
