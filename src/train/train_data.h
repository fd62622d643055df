// TrainData: what a fine-tuning run learns from, as token ids with the
// positions whose next token counts in the loss.
//
// Two kinds of file:
//   plain text   the whole file tokenized once (BOS first as the model's
//                tokenizer says), cut into windows of seq + 1 tokens that
//                overlap by one: window i's inputs are tokens i*seq .. i*seq +
//                seq - 1 and each predicts the next; every position counts.
//   JSONL        one object a line: {"messages": [{"role", "content"}, ...]}
//                (chat: rendered with the model's chat template; only the
//                assistant messages' tokens count), or {"text": "..."} (one
//                sequence, every position counts). Longer sequences are cut to
//                seq + 1 tokens (counted in n_truncated).
// A file is JSONL when its name ends in .jsonl or its first non-blank
// character is '{'.
//
//   example:  tokens  t0  t1  t2  t3  ...      (inputs, at positions 0, 1, ...)
//             targets t1  t2  -1  t4  ...      (-1: that prediction is not in the loss)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {
class Tokenizer;
namespace server {
class ChatTemplate;
}

struct TrainExample {
  std::vector<int32_t> tokens;   // [n] inputs
  std::vector<int32_t> targets;  // [n] the next token where it counts, else -1
};

struct TrainData {
  std::vector<TrainExample> examples;
  std::string kind;          // "text", "chat" or "jsonl text"
  int64_t n_tokens = 0;      // inputs over all examples
  int64_t n_counted = 0;     // targets that count
  int64_t n_truncated = 0;   // JSONL sequences cut to seq + 1 tokens
  int64_t n_dropped = 0;     // JSONL lines left with nothing to learn (no assistant token within seq)
  uint64_t hash = 0;         // of every token and target, in order: what a checkpoint must resume on
};

struct TrainDataOptions {
  int64_t seq = 512;                             // longest example, in input tokens
  const Tokenizer* tokenizer = nullptr;
  const server::ChatTemplate* chat = nullptr;    // needed for {"messages": ...} lines
};

// Errors: an unreadable file, a malformed JSONL line (its number named), a
// chat line without a template, a role the template refuses, and a file that
// yields no example with a counted target ("tokenizes to nothing").
StatusOr<TrainData> load_train_data(const std::string& path, const TrainDataOptions& options);

// Moves every k-th example (k = round(1 / fraction)) of `data` into a second
// set, for held-out losses; the first example stays in training. fraction 0:
// nothing moves. Errors: a fraction outside [0, 0.5], or too few examples to
// keep one on each side.
StatusOr<TrainData> split_heldout(TrainData& data, double fraction);

}  // namespace sluice
