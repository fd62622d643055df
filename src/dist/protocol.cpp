#include "dist/protocol.h"

#include <cstring>

#include "kv/kv_store.h"

namespace sluice::dist {
namespace {

template <typename T>
void put(std::vector<uint8_t>* out, size_t* at, const T* data, size_t n) {
  std::memcpy(out->data() + *at, data, n * sizeof(T));
  *at += n * sizeof(T);
}

template <typename T>
std::span<const T> take(std::span<const uint8_t> msg, size_t* at, size_t n) {
  const T* p = reinterpret_cast<const T*>(msg.data() + *at);
  *at += n * sizeof(T);
  return {p, n};
}

}  // namespace

void encode_step(std::span<const ForwardSeq> seqs, std::span<const int32_t> micro_ends,
                 std::span<const BlockCopy> copies, const KvStore& kv, std::vector<uint8_t>* out) {
  StepHeader h{.kind = static_cast<int32_t>(StepKind::kStep), .n_seqs = static_cast<int32_t>(seqs.size()),
               .n_micro = static_cast<int32_t>(micro_ends.size()), .n_copies = static_cast<int32_t>(copies.size()),
               .kv_blocks = kv.n_blocks(), .kv_dtype = static_cast<int32_t>(kv.layout().dtype),
               .kv_block_size = static_cast<int32_t>(kv.layout().block_size)};
  for (const ForwardSeq& s : seqs) {
    h.n_tokens += static_cast<int64_t>(s.tokens.size());
    h.n_table += static_cast<int64_t>(s.block_table.size());
  }
  const size_t bytes = sizeof h + seqs.size() * sizeof(StepSeq) + micro_ends.size_bytes() +
                       copies.size() * 2 * sizeof(int32_t) +
                       static_cast<size_t>(h.n_tokens + h.n_table) * sizeof(int32_t);
  out->resize(bytes);
  size_t at = 0;
  put(out, &at, &h, 1);
  for (const ForwardSeq& s : seqs) {
    const StepSeq q{.pos0 = s.pos0, .n_tokens = static_cast<int32_t>(s.tokens.size()),
                    .n_logits = static_cast<int32_t>(s.n_logits), .n_blocks = static_cast<int32_t>(s.block_table.size())};
    put(out, &at, &q, 1);
  }
  put(out, &at, micro_ends.data(), micro_ends.size());
  for (const BlockCopy& c : copies) {
    const int32_t pair[2] = {c.src, c.dst};
    put(out, &at, pair, 2);
  }
  for (const ForwardSeq& s : seqs) put(out, &at, s.tokens.data(), s.tokens.size());
  for (const ForwardSeq& s : seqs) put(out, &at, s.block_table.data(), s.block_table.size());
}

void encode_shutdown(std::vector<uint8_t>* out) {
  const StepHeader h{.kind = static_cast<int32_t>(StepKind::kShutdown)};
  out->resize(sizeof h);
  std::memcpy(out->data(), &h, sizeof h);
}

StatusOr<StepView> decode_step(std::span<const uint8_t> msg) {
  StepView v;
  if (msg.size() < sizeof v.h) return data_loss("a step message of {} bytes is shorter than its header", msg.size());
  std::memcpy(&v.h, msg.data(), sizeof v.h);
  if (v.h.kind == static_cast<int32_t>(StepKind::kShutdown)) return v;
  const StepHeader& h = v.h;
  if (h.kind != static_cast<int32_t>(StepKind::kStep) || h.n_seqs < 0 || h.n_micro < 0 || h.n_copies < 0 ||
      h.n_tokens < 0 || h.n_table < 0)
    return data_loss("a step message with a malformed header");
  const size_t need = sizeof h + static_cast<size_t>(h.n_seqs) * sizeof(StepSeq) +
                      static_cast<size_t>(h.n_micro + 2 * h.n_copies) * sizeof(int32_t) +
                      static_cast<size_t>(h.n_tokens + h.n_table) * sizeof(int32_t);
  if (msg.size() != need) return data_loss("a step message of {} bytes where its header says {}", msg.size(), need);
  size_t at = sizeof h;
  v.seqs = take<StepSeq>(msg, &at, static_cast<size_t>(h.n_seqs));
  v.micro_ends = take<int32_t>(msg, &at, static_cast<size_t>(h.n_micro));
  v.copies = take<int32_t>(msg, &at, static_cast<size_t>(2 * h.n_copies));
  v.tokens = take<int32_t>(msg, &at, static_cast<size_t>(h.n_tokens));
  v.tables = take<int32_t>(msg, &at, static_cast<size_t>(h.n_table));
  int64_t n_tok = 0, n_tab = 0;
  for (const StepSeq& s : v.seqs) {
    if (s.n_tokens < 0 || s.n_blocks < 0) return data_loss("a step message with a negative count");
    n_tok += s.n_tokens;
    n_tab += s.n_blocks;
  }
  if (n_tok != h.n_tokens || n_tab != h.n_table) return data_loss("a step message whose sequences do not add up");
  int32_t prev = 0;
  for (int32_t e : v.micro_ends) {
    if (e <= prev || e > h.n_seqs) return data_loss("a step message with malformed micro-batch ends");
    prev = e;
  }
  if (h.n_seqs > 0 && prev != h.n_seqs) return data_loss("a step message whose micro-batches miss sequences");
  return v;
}

void split_micro_batches(std::span<const ForwardSeq> seqs, int64_t m, std::vector<int32_t>* ends) {
  ends->clear();
  const auto n_seqs = static_cast<int64_t>(seqs.size());
  m = std::max<int64_t>(1, std::min(m, n_seqs));
  int64_t total = 0;
  for (const ForwardSeq& s : seqs) total += static_cast<int64_t>(s.tokens.size());
  // Group g ends at the first sequence whose running count reaches (g+1)/m of
  // the tokens, leaving at least one sequence for every later group.
  int64_t run = 0;
  int64_t i = 0;
  for (int64_t g = 0; g < m; ++g) {
    const int64_t target = (g + 1) * total / m;
    const int64_t last = n_seqs - (m - 1 - g);  // exclusive bound
    do {
      run += static_cast<int64_t>(seqs[static_cast<size_t>(i)].tokens.size());
      ++i;
    } while (i < last && run < target);
    ends->push_back(static_cast<int32_t>(i));
  }
  ends->back() = static_cast<int32_t>(n_seqs);
}

void cut_sequences(std::span<const ForwardSeq> seqs, int64_t m, size_t max_pieces, std::vector<ForwardSeq>* out) {
  out->clear();
  int64_t total = 0;
  for (const ForwardSeq& s : seqs) total += static_cast<int64_t>(s.tokens.size());
  const auto piece = [](const ForwardSeq& s, int64_t a, int64_t b, int64_t n_logits) {
    return ForwardSeq{.tokens = s.tokens.subspan(static_cast<size_t>(a), static_cast<size_t>(b - a)),
                      .pos0 = s.pos0 + a, .block_table = s.block_table, .n_logits = n_logits, .loras = s.loras};
  };
  int64_t g = 1;      // the next boundary: g * total / m tokens
  int64_t start = 0;  // tokens before sequence i
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ForwardSeq& s = seqs[i];
    const auto len = static_cast<int64_t>(s.tokens.size());
    int64_t a = 0;  // where the piece being built starts
    for (; g < m; ++g) {
      const int64_t at = g * total / m - start;
      if (at >= len) break;  // at or past this sequence's end: a boundary between sequences
      // This piece, the rest of this sequence and every later sequence.
      const bool room = out->size() + 1 + (seqs.size() - i) <= max_pieces;
      if (at <= a || at > len - s.n_logits || !room) continue;
      out->push_back(piece(s, a, at, 0));
      a = at;
    }
    out->push_back(piece(s, a, len, s.n_logits));
    start += len;
  }
}

}  // namespace sluice::dist
