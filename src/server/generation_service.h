// GenerationService: what the HTTP server generates with. The part of the
// Engine API a request needs (submit, abort, drain, the tokenizer, the model's
// name and context), so the server's request path does not depend on how the
// tokens are produced. EngineService serves with an Engine (what `sluice
// serve` uses); a test can serve fixed outputs through the same HTTP and
// request path. Implementations follow Engine's contracts and thread-safety:
// submit/abort/drain from any thread, callbacks quick and non-blocking.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sluice/engine.h"
#include "sluice/status.h"

namespace sluice::server {

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // As Engine::submit: queues the request; events arrive on on_event.
  virtual StatusOr<RequestId> submit(Request request, EventCallback on_event) = 0;
  // As Engine::abort: the request's outputs finish with kAbort.
  virtual void abort(RequestId id) = 0;
  // As Engine::drain: refuses new work, waits up to timeout_s; true if all finished.
  virtual bool drain(double timeout_s) = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const std::string& model_name() const = 0;
  virtual int64_t ctx_size() const = 0;  // positions per sequence
  // As Engine::lora_names: the adapters a request may pick (Request::loras).
  virtual std::vector<std::string> lora_names() const { return {}; }
  // As Engine::describe_json: the model and its placement ("": not known).
  virtual std::string describe_json() const { return ""; }
  // Changes whenever describe_json()'s placement moves (the fluid split's
  // demotions and promotions), so a cached copy knows to refresh. Default: never.
  virtual uint64_t placement_version() const { return 0; }
};

// The Engine as a GenerationService.
class EngineService final : public GenerationService {
 public:
  explicit EngineService(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}
  StatusOr<RequestId> submit(Request request, EventCallback on_event) override {
    return engine_->submit(std::move(request), std::move(on_event));
  }
  void abort(RequestId id) override { engine_->abort(id); }
  bool drain(double timeout_s) override { return engine_->drain(timeout_s); }
  const Tokenizer& tokenizer() const override { return engine_->tokenizer(); }
  const std::string& model_name() const override { return engine_->model_name(); }
  int64_t ctx_size() const override { return engine_->ctx_size(); }
  std::vector<std::string> lora_names() const override { return engine_->lora_names(); }
  std::string describe_json() const override { return engine_->describe_json(); }
  uint64_t placement_version() const override {
    const EngineStats s = engine_->stats();
    return static_cast<uint64_t>(s.fluid_demotions + s.fluid_promotions);
  }

 private:
  std::shared_ptr<Engine> engine_;
};

}  // namespace sluice::server
