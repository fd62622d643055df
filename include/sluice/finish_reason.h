// FinishReason: why one output of a request ended, named once for the engine,
// the CLI and the OpenAI API (whose finish_reason strings are these names).
#pragma once

namespace sluice {

enum class FinishReason {
  kNone,    // not finished
  kStop,    // a stop token, an end-of-generation token or a stop string
  kLength,  // max_tokens generated, or the context is full
  kAbort,   // the caller ended it (abort, disconnect, shutdown)
  kError,   // the step that computed it failed
};

// "stop", "length", "abort", "error" ("" for kNone).
const char* finish_reason_name(FinishReason reason);

}  // namespace sluice
