#include "kv/block_manager.h"

#include <algorithm>

#include "base/check.h"

namespace sluice {

int64_t kv_window_blocks(int64_t window, int64_t block_size) {
  CHECK(window >= 0 && block_size > 0);
  return window > 0 ? (window + block_size - 1) / block_size + 1 : 0;
}

int64_t kv_blocks_per_seq(int64_t n_ctx, int64_t block_size, int64_t window) {
  CHECK(n_ctx >= 0 && block_size > 0 && window >= 0);
  const int64_t all = (n_ctx + block_size - 1) / block_size;
  return window > 0 ? std::min(all, kv_window_blocks(window, block_size)) : all;
}

BlockManager::BlockManager(const BlockManagerConfig& config)
    : block_size_(config.block_size),
      enable_prefix_caching_(config.enable_prefix_caching),
      window_(config.window),
      pool_(config.n_blocks, config.n_blocks_limit > 0 ? config.n_blocks_limit : -1),
      n_host_total_(config.n_host_blocks) {
  CHECK(config.block_size > 0 && config.n_blocks > 0 && config.n_host_blocks >= 0 && config.window >= 0);
  host_free_.reserve(static_cast<size_t>(n_host_total_));
  for (int64_t s = n_host_total_ - 1; s >= 0; --s) host_free_.push_back(static_cast<int32_t>(s));
}

void BlockManager::match_blocks(std::span<const int32_t> tokens, uint64_t root, std::vector<int32_t>* blocks,
                                std::vector<uint64_t>* hashes) const {
  if (!enable_prefix_caching_ || tokens.empty()) return;
  // At least one token stays uncomputed so the sequence's step produces logits.
  const int64_t n_max = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  uint64_t prev = root;
  for (int64_t i = 0; i < n_max; ++i) {
    const uint64_t h = kv_block_hash(
        prev, tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_)));
    const std::optional<int32_t> b = pool_.find(h);
    if (!b) break;
    blocks->push_back(*b);
    hashes->push_back(h);
    prev = h;
  }
}

int64_t BlockManager::skipped_prefix_blocks(int64_t n_matched) const {
  if (window_ == 0) return 0;
  // The first computed query is at position n_matched * block_size.
  return std::max<int64_t>(0, n_matched * block_size_ - window_ + 1) / block_size_;
}

int64_t BlockManager::match_prefix(std::span<const int32_t> tokens, uint64_t prefix_key) const {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;
  match_blocks(tokens, kv_prefix_root(prefix_key), &blocks, &hashes);
  return static_cast<int64_t>(blocks.size()) * block_size_;
}

bool BlockManager::can_allocate(std::span<const int32_t> tokens, int64_t n_reserve, uint64_t prefix_key) const {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;
  match_blocks(tokens, kv_prefix_root(prefix_key), &blocks, &hashes);
  // Matched blocks that are cached free stop being available once shared (those
  // before a window are not taken).
  const int64_t n_skip = skipped_prefix_blocks(static_cast<int64_t>(blocks.size()));
  int64_t n_matched_cached = 0;
  for (size_t i = static_cast<size_t>(n_skip); i < blocks.size(); ++i) n_matched_cached += pool_.ref_count(blocks[i]) == 0 ? 1 : 0;
  const int64_t n_fresh = blocks_for(static_cast<int64_t>(tokens.size())) - static_cast<int64_t>(blocks.size());
  return n_fresh <= pool_.n_available() - n_matched_cached - n_reserve;
}

StatusOr<int64_t> BlockManager::allocate(SeqId seq, std::span<const int32_t> tokens, uint64_t prefix_key) {
  if (seqs_.count(seq)) return invalid_argument("kv allocate: sequence {} already has blocks", seq);
  if (tokens.empty()) return invalid_argument("kv allocate: sequence {} has no tokens", seq);
  if (!can_allocate(tokens, 0, prefix_key)) {
    return resource_exhausted("kv allocate: {} tokens of sequence {} do not fit in {} available blocks",
                              tokens.size(), seq, pool_.n_available());
  }
  SeqBlocks s;
  s.root = kv_prefix_root(prefix_key);
  match_blocks(tokens, s.root, &s.table, &s.hashes);
  // Take the matched blocks before allocating: a fresh allocation may evict any
  // cached free block, and these must not be among the victims. With a window,
  // the ones wholly before the first query's window are not taken at all.
  s.n_released = skipped_prefix_blocks(static_cast<int64_t>(s.table.size()));
  for (size_t i = 0; i < s.table.size(); ++i) {
    if (static_cast<int64_t>(i) < s.n_released) s.table[i] = kReleasedBlock;
    else pool_.ref(s.table[i]);
  }
  const int64_t n_blocks = blocks_for(static_cast<int64_t>(tokens.size()));
  while (static_cast<int64_t>(s.table.size()) < n_blocks) {
    const std::optional<int32_t> b = pool_.allocate();
    CHECK(b.has_value());  // can_allocate said so
    s.table.push_back(*b);
  }
  s.tokens.assign(tokens.begin(), tokens.end());
  const int64_t n_cached = static_cast<int64_t>(s.hashes.size()) * block_size_;
  n_prefix_queried_tokens_ += static_cast<int64_t>(tokens.size());
  n_prefix_hit_tokens_ += n_cached;
  seqs_.emplace(seq, std::move(s));
  return n_cached;
}

int64_t BlockManager::blocks_needed_to_append(SeqId seq, int64_t n_new) const {
  auto it = seqs_.find(seq);
  CHECK(it != seqs_.end() && !it->second.swapped && n_new >= 0);
  const SeqBlocks& s = it->second;
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  int64_t needed = blocks_for(n + n_new) - static_cast<int64_t>(s.table.size());
  if (n_new > 0 && n % block_size_ != 0 && pool_.ref_count(s.table.back()) > 1) ++needed;  // CoW
  return needed;
}

bool BlockManager::can_append(SeqId seq, int64_t n_new) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || it->second.swapped || n_new < 0) return false;
  return blocks_needed_to_append(seq, n_new) <= pool_.n_available();
}

StatusOr<BlockManager::SeqBlocks*> BlockManager::find_device_seq(SeqId seq, const char* op) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("kv {}: unknown sequence {}", op, seq);
  if (it->second.swapped) return invalid_argument("kv {}: sequence {} is swapped out", op, seq);
  return &it->second;
}

StatusOr<std::vector<BlockCopy>> BlockManager::append(SeqId seq, std::span<const int32_t> tokens) {
  ASSIGN_OR_RETURN(SeqBlocks* s, find_device_seq(seq, "append"));
  std::vector<BlockCopy> copies;
  if (tokens.empty()) return copies;
  if (!can_append(seq, static_cast<int64_t>(tokens.size()))) {
    return resource_exhausted("kv append: {} tokens for sequence {} need {} blocks, {} available",
                              tokens.size(), seq, blocks_needed_to_append(seq, static_cast<int64_t>(tokens.size())),
                              pool_.n_available());
  }
  const int64_t n = static_cast<int64_t>(s->tokens.size());
  if (n % block_size_ != 0) {
    // The next row lands in the partial last block.
    const int32_t last = s->table.back();
    if (pool_.ref_count(last) > 1) {
      const std::optional<int32_t> fresh = pool_.allocate();
      CHECK(fresh.has_value());
      pool_.unref(last);
      s->table.back() = *fresh;
      copies.push_back({.src = last, .dst = *fresh});
      ++n_cow_copies_;
    } else if (pool_.has_hash(last)) {
      // A truncated block still registered (another holder had it whole, then
      // let go): the write below changes it, so its hash no longer describes it.
      pool_.unregister_hash(last);
    }
  }
  s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.end());
  const int64_t n_blocks = blocks_for(static_cast<int64_t>(s->tokens.size()));
  while (static_cast<int64_t>(s->table.size()) < n_blocks) {
    const std::optional<int32_t> b = pool_.allocate();
    CHECK(b.has_value());
    s->table.push_back(*b);
  }
  return copies;
}

Status BlockManager::mark_computed(SeqId seq, int64_t n_computed) {
  ASSIGN_OR_RETURN(SeqBlocks* s, find_device_seq(seq, "mark_computed"));
  if (n_computed < 0 || n_computed > static_cast<int64_t>(s->tokens.size())) {
    return invalid_argument("kv mark_computed: {} computed of {} reserved tokens for sequence {}", n_computed,
                            s->tokens.size(), seq);
  }
  const std::span<const int32_t> tokens(s->tokens);
  const int64_t n_full = n_computed / block_size_;
  for (int64_t i = static_cast<int64_t>(s->hashes.size()); i < n_full; ++i) {
    const uint64_t prev = i == 0 ? s->root : s->hashes[static_cast<size_t>(i - 1)];
    const uint64_t h = kv_block_hash(
        prev, tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_)));
    s->hashes.push_back(h);
    const int32_t b = s->table[static_cast<size_t>(i)];
    if (!enable_prefix_caching_ || b == kReleasedBlock) continue;
    if (pool_.has_hash(b)) {
      // Shared with a fork that registered it first: same tokens, same hash.
      if (pool_.hash(b) != h) {
        return internal_error("kv mark_computed: block {} of sequence {} carries another hash", b, seq);
      }
      continue;
    }
    // False when another block already holds these tokens: this one stays a
    // private duplicate and is simply freed later.
    (void)pool_.register_hash(b, h);
  }
  if (window_ > 0) release_before(s, n_computed - window_ + 1);
  return Status::ok_status();
}

void BlockManager::release_before(SeqBlocks* s, int64_t pos) {
  const int64_t n_before = std::min<int64_t>(pos / block_size_, static_cast<int64_t>(s->table.size()));
  // In position order: the oldest blocks become the first cached ones evicted.
  for (; s->n_released < n_before; ++s->n_released) {
    int32_t& b = s->table[static_cast<size_t>(s->n_released)];
    pool_.unref(b);
    b = kReleasedBlock;
  }
}

Status BlockManager::fork(SeqId parent, SeqId child) {
  ASSIGN_OR_RETURN(SeqBlocks* p, find_device_seq(parent, "fork"));
  if (seqs_.count(child)) return invalid_argument("kv fork: sequence {} already exists", child);
  SeqBlocks c = *p;
  for (const int32_t b : c.table)
    if (b != kReleasedBlock) pool_.ref(b);
  seqs_.emplace(child, std::move(c));
  return Status::ok_status();
}

Status BlockManager::truncate(SeqId seq, int64_t n_tokens) {
  ASSIGN_OR_RETURN(SeqBlocks* s, find_device_seq(seq, "truncate"));
  if (n_tokens < 0 || n_tokens > static_cast<int64_t>(s->tokens.size())) {
    return invalid_argument("kv truncate: sequence {} has {} tokens, cannot keep {}", seq, s->tokens.size(),
                            n_tokens);
  }
  if (n_tokens <= s->n_released * block_size_ && s->n_released > 0) {
    return invalid_argument("kv truncate: sequence {} released its blocks before position {}, cannot keep {} tokens",
                            seq, s->n_released * block_size_, n_tokens);
  }
  const size_t n_keep = static_cast<size_t>(blocks_for(n_tokens));
  // Free the tail last block first, so it is the first cached block evicted.
  while (s->table.size() > n_keep) {
    pool_.unref(s->table.back());
    s->table.pop_back();
  }
  s->tokens.resize(static_cast<size_t>(n_tokens));
  s->hashes.resize(std::min(s->hashes.size(), static_cast<size_t>(n_tokens / block_size_)));
  if (n_tokens % block_size_ != 0) {
    const int32_t last = s->table.back();
    if (pool_.has_hash(last) && pool_.ref_count(last) == 1) pool_.unregister_hash(last);
  }
  return Status::ok_status();
}

void BlockManager::release_device_blocks(SeqBlocks* s) {
  // Reverse order: a sequence's deepest blocks are the least likely to be shared
  // and useless without the ones before them, so they should be evicted first.
  for (auto it = s->table.rbegin(); it != s->table.rend(); ++it)
    if (*it != kReleasedBlock) pool_.unref(*it);
  s->table.clear();
}

Status BlockManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("kv free: unknown sequence {}", seq);
  SeqBlocks& s = it->second;
  release_device_blocks(&s);
  for (const int32_t slot : s.host_table)
    if (slot != kReleasedBlock) host_free_.push_back(slot);
  seqs_.erase(it);
  return Status::ok_status();
}

bool BlockManager::can_swap_out(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || it->second.swapped) return false;
  const int64_t n_held = static_cast<int64_t>(it->second.table.size()) - it->second.n_released;
  return n_held <= static_cast<int64_t>(host_free_.size());
}

StatusOr<std::vector<BlockSwap>> BlockManager::swap_out(SeqId seq) {
  ASSIGN_OR_RETURN(SeqBlocks* s, find_device_seq(seq, "swap_out"));
  if (!can_swap_out(seq)) {
    return resource_exhausted("kv swap_out: sequence {} needs {} host slots, {} free", seq, s->table.size(),
                              host_free_.size());
  }
  std::vector<BlockSwap> moves;
  moves.reserve(s->table.size());
  for (const int32_t b : s->table) {
    if (b == kReleasedBlock) {
      s->host_table.push_back(kReleasedBlock);
      continue;
    }
    const int32_t slot = host_free_.back();
    host_free_.pop_back();
    s->host_table.push_back(slot);
    moves.push_back({.device_block = b, .host_slot = slot});
  }
  release_device_blocks(s);
  s->swapped = true;
  n_swapped_out_blocks_ += static_cast<int64_t>(moves.size());
  return moves;
}

bool BlockManager::can_swap_in(SeqId seq, int64_t n_new) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || !it->second.swapped || n_new < 0) return false;
  // Counted as if every block were fresh: prefix-cache hits only lower the need.
  return blocks_for(static_cast<int64_t>(it->second.tokens.size()) + n_new) - it->second.n_released <=
         pool_.n_available();
}

StatusOr<std::vector<BlockSwap>> BlockManager::swap_in(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || !it->second.swapped) {
    return invalid_argument("kv swap_in: sequence {} is not swapped out", seq);
  }
  if (!can_swap_in(seq)) {
    return resource_exhausted("kv swap_in: sequence {} needs {} blocks, {} available", seq,
                              it->second.host_table.size(), pool_.n_available());
  }
  SeqBlocks& s = it->second;
  const size_t n_blocks = s.host_table.size();
  // First share every full block still registered (before any allocation can
  // evict it), then fill the gaps with fresh blocks to copy into.
  s.table.assign(n_blocks, -1);
  for (size_t i = static_cast<size_t>(s.n_released); i < s.hashes.size() && enable_prefix_caching_; ++i) {
    const std::optional<int32_t> b = pool_.find(s.hashes[i]);
    if (!b) continue;
    pool_.ref(*b);
    s.table[i] = *b;
  }
  std::vector<BlockSwap> moves;
  for (size_t i = 0; i < n_blocks; ++i) {
    if (s.host_table[i] == kReleasedBlock) continue;  // stays released
    if (s.table[i] < 0) {
      const std::optional<int32_t> b = pool_.allocate();
      CHECK(b.has_value());
      s.table[i] = *b;
      moves.push_back({.device_block = *b, .host_slot = s.host_table[i]});
      if (i < s.hashes.size() && enable_prefix_caching_) (void)pool_.register_hash(*b, s.hashes[i]);
    }
    host_free_.push_back(s.host_table[i]);
  }
  s.host_table.clear();
  s.swapped = false;
  n_swapped_in_blocks_ += static_cast<int64_t>(moves.size());
  return moves;
}

bool BlockManager::is_swapped(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it != seqs_.end() && it->second.swapped;
}

int64_t BlockManager::n_tokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.tokens.size());
}

std::span<const int32_t> BlockManager::tokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.tokens;
}

int64_t BlockManager::n_released(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.n_released;
}

std::span<const int32_t> BlockManager::block_table(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.table;
}

BlockStats BlockManager::stats() const {
  return BlockStats{
      .n_total = pool_.n_total(),
      .n_used = pool_.n_used(),
      .n_draining = pool_.n_draining(),
      .n_free = pool_.n_available() - pool_.n_cached(),
      .n_cached = pool_.n_cached(),
      .n_host_total = n_host_total_,
      .n_host_used = n_host_total_ - static_cast<int64_t>(host_free_.size()),
      .n_prefix_queried_tokens = n_prefix_queried_tokens_,
      .n_prefix_hit_tokens = n_prefix_hit_tokens_,
      .n_evictions = pool_.n_evictions(),
      .n_cow_copies = n_cow_copies_,
      .n_swapped_out_blocks = n_swapped_out_blocks_,
      .n_swapped_in_blocks = n_swapped_in_blocks_,
  };
}

Status BlockManager::check_invariants() const {
  const int64_t n = pool_.n_ids();
  std::vector<int32_t> refs(static_cast<size_t>(n), 0);
  std::vector<int64_t> position(static_cast<size_t>(n), -1);  // block index within any table
  std::vector<uint8_t> host_held(static_cast<size_t>(n_host_total_), 0);
  for (const auto& [id, s] : seqs_) {
    const int64_t n_blocks = blocks_for(static_cast<int64_t>(s.tokens.size()));
    const auto& held = s.swapped ? s.host_table : s.table;
    const auto& other = s.swapped ? s.table : s.host_table;
    if (static_cast<int64_t>(held.size()) != n_blocks || !other.empty()) {
      return internal_error("kv: sequence {} ({}) holds {} blocks + {} host slots for {} tokens", id,
                            s.swapped ? "swapped" : "resident", s.table.size(), s.host_table.size(),
                            s.tokens.size());
    }
    if (s.hashes != kv_block_hashes(std::span<const int32_t>(s.tokens).first(s.hashes.size() * block_size_),
                                    block_size_, s.root)) {
      return internal_error("kv: sequence {} block hashes do not chain over its tokens", id);
    }
    if (s.n_released < 0 || s.n_released > static_cast<int64_t>(held.size()) ||
        (s.n_released > 0 && (window_ == 0 || s.n_released * block_size_ > static_cast<int64_t>(s.tokens.size())))) {
      return internal_error("kv: sequence {} released {} blocks of {} tokens (window {})", id, s.n_released,
                            s.tokens.size(), window_);
    }
    for (size_t i = 0; i < held.size(); ++i) {
      if ((held[i] == kReleasedBlock) != (static_cast<int64_t>(i) < s.n_released)) {
        return internal_error("kv: sequence {} entry {} is {} with {} released", id, i,
                              held[i] == kReleasedBlock ? "released" : "held", s.n_released);
      }
    }
    for (size_t i = static_cast<size_t>(s.n_released); i < s.host_table.size(); ++i) {
      const int32_t slot = s.host_table[i];
      if (slot < 0 || slot >= n_host_total_ || host_held[slot]) {
        return internal_error("kv: sequence {} holds bad or shared host slot {}", id, slot);
      }
      host_held[slot] = 1;
    }
    for (size_t i = static_cast<size_t>(s.n_released); i < s.table.size(); ++i) {
      const int32_t b = s.table[i];
      if (b < 0 || b >= n) return internal_error("kv: sequence {} table holds bad block id {}", id, b);
      ++refs[b];
      if (position[b] >= 0 && position[b] != static_cast<int64_t>(i)) {
        return internal_error("kv: block {} sits at positions {} and {} of tables", b, position[b], i);
      }
      position[b] = static_cast<int64_t>(i);
      if (i < s.hashes.size() && pool_.has_hash(b) && pool_.hash(b) != s.hashes[i]) {
        return internal_error("kv: block {} of sequence {} is registered under another prefix", b, id);
      }
    }
  }
  for (const int32_t slot : host_free_) {
    if (slot < 0 || slot >= n_host_total_ || host_held[slot]) {
      return internal_error("kv: host slot {} is free and held, or out of range", slot);
    }
    host_held[slot] = 1;
  }
  for (int64_t slot = 0; slot < n_host_total_; ++slot) {
    if (!host_held[slot]) return internal_error("kv: host slot {} is neither free nor held", slot);
  }
  return pool_.check_invariants(refs);
}

}  // namespace sluice
