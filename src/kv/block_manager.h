// BlockManager: per-sequence block tables over a BlockPool, with automatic prefix
// caching, copy-on-write, fork, truncate and swap to a host-side pool.
//
// A sequence's table maps token positions to device blocks:
//
//   position p  ->  block table[p / block_size], row p % block_size
//
//   tokens  [ 0 .. 15 ][ 16 .. 31 ][ 32 33 34 . . . ]    block_size = 16
//   table      b7          b2          b9 (partial)
//
// "Tokens" here are the positions whose slot is reserved (allocate/append); the
// caller computes their K/V later and reports progress with mark_computed. A block
// becomes reusable by other sequences (registered under its chained hash, see
// prefix_cache.h) only once it is full AND every row of it has been computed, so a
// prefix hit never reads rows that are still to be written.
//
// Sliding window (config.window > 0: every layer of the model attends to the
// last `window` positions only): once a sequence's first n tokens are computed,
// its next query is at position n or later and reads positions >= n - window + 1,
// so mark_computed releases the blocks wholly before that position. The table
// keeps its indexing; a released entry holds kReleasedBlock. A released block
// shared with another table (fork, prefix hit) only loses this table's
// reference; a hashed one becomes cached free like any released block, so prefix
// caching keeps working. truncate() cannot go back into released blocks; swap
// moves only the blocks still held.
//
// Memory is not touched here: operations that need bytes moved return them as
// plain data (BlockCopy for copy-on-write, BlockSwap for swap) and the caller
// moves the K/V rows before the next forward pass. Host slots are a second,
// smaller pool of the same block size used only while a sequence is swapped out.
//
// Not thread-safe: owned by the engine thread. Errors that a caller's bad ids or
// lengths can cause are Status values; broken internal invariants abort (CHECK).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "sluice/status.h"

namespace sluice {

using SeqId = int64_t;

// Copy every row of device block src into device block dst (copy-on-write).
struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
};

// One block moved between the device pool and the host pool (direction given by
// the call that produced it: swap_out copies device -> host, swap_in host -> device).
struct BlockSwap {
  int32_t device_block = -1;
  int32_t host_slot = -1;
};

struct BlockManagerConfig {
  int64_t n_blocks = 0;                // device blocks (see kv_blocks_for_budget)
  int64_t n_blocks_limit = 0;          // of those, usable at start (0: all; set_block_limit moves it)
  int64_t block_size = 16;             // tokens per block
  int64_t n_host_blocks = 0;           // host slots for swap; 0 disables swap
  bool enable_prefix_caching = true;
  int64_t window = 0;                  // every layer's sliding window in positions (0: none; a model
                                       // with any global layer keeps all blocks)
};

// The most blocks one sequence of up to n_ctx positions holds: ceil(n_ctx /
// block_size), or, with a sliding window on every layer (window > 0, see
// BlockManager), no more than kv_window_blocks(window, block_size), since the
// blocks wholly behind the window are released. A model with any global layer
// passes window 0 (it keeps every block). The engine's pool sizing and the
// planner both count with this.
int64_t kv_blocks_per_seq(int64_t n_ctx, int64_t block_size, int64_t window);
// Blocks a decoding sequence holds once past a window of `window` positions:
// ceil(window / block_size) + 1 (the window's positions span at most that many
// blocks; the next token's slot is in one of them or the next); 0 without one.
int64_t kv_window_blocks(int64_t window, int64_t block_size);

// A table entry whose block was released (before the sliding window).
constexpr int32_t kReleasedBlock = -1;

struct BlockStats {
  int64_t n_total = 0;             // device blocks usable now (the pool's limit)
  int64_t n_used = 0;              // held by at least one table
  int64_t n_draining = 0;          // of n_used, past the limit (retired when freed)
  int64_t n_free = 0;              // not held, no hash
  int64_t n_cached = 0;            // not held, hash kept (reusable until evicted)
  int64_t n_host_total = 0;
  int64_t n_host_used = 0;
  int64_t n_prefix_queried_tokens = 0;  // prompt tokens passed to allocate()
  int64_t n_prefix_hit_tokens = 0;      // of those, covered by cached blocks
  int64_t n_evictions = 0;
  int64_t n_cow_copies = 0;
  int64_t n_swapped_out_blocks = 0;
  int64_t n_swapped_in_blocks = 0;  // host -> device copies (prefix-cache hits skip the copy)
};

class BlockManager {
 public:
  explicit BlockManager(const BlockManagerConfig& config);

  int64_t block_size() const { return block_size_; }
  // Blocks that hold n_tokens tokens: ceil(n_tokens / block_size).
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  int64_t window() const { return window_; }
  // With a window: the most blocks a decoding sequence holds after it passed the
  // window, ceil(window / block_size) + 1 (the window's positions span at most
  // that many blocks; the next token's slot is in one of them or the next); 0
  // without a window.
  int64_t window_blocks() const { return kv_window_blocks(window_, block_size_); }

  // Leading tokens of `tokens` covered by registered full blocks, a multiple of
  // block_size and at most n - 1 rounded down (one token is always left to
  // compute). prefix_key: what else the K/V rows depend on (the sequence's
  // adapters; prefix_cache.h): blocks match only under the same key.
  int64_t match_prefix(std::span<const int32_t> tokens, uint64_t prefix_key = 0) const;
  // Whether allocate(tokens) would succeed and still leave n_reserve blocks available.
  bool can_allocate(std::span<const int32_t> tokens, int64_t n_reserve = 0, uint64_t prefix_key = 0) const;
  // Creates seq's table for `tokens`: matched prefix blocks are shared (refcount+1;
  // with a window, those wholly before the first computed query's window are
  // entered released), the rest are fresh; the blocks it completes are
  // registered under prefix_key. Returns the number of leading tokens already
  // computed.
  // Errors: seq exists, tokens empty, not enough blocks.
  StatusOr<int64_t> allocate(SeqId seq, std::span<const int32_t> tokens, uint64_t prefix_key = 0);

  // Fresh blocks append(seq, n_new tokens) needs, copy-on-write included. seq
  // must be resident (a known, not swapped sequence): checked, a bug otherwise.
  int64_t blocks_needed_to_append(SeqId seq, int64_t n_new) const;
  bool can_append(SeqId seq, int64_t n_new) const;
  // Reserves slots for `tokens` after seq's last one. If the partial last block is
  // shared it is first replaced by a private copy, returned for the caller to do.
  // Errors: unknown or swapped seq, not enough blocks.
  StatusOr<std::vector<BlockCopy>> append(SeqId seq, std::span<const int32_t> tokens);
  // Records that seq's first n_computed tokens have K/V; registers the hashes of
  // the full blocks this completes; with a window, releases the blocks wholly
  // before position n_computed - window + 1. Errors: unknown/swapped seq, n past
  // the tokens.
  Status mark_computed(SeqId seq, int64_t n_computed);

  // child gets parent's tokens and shares all its blocks; the first append to
  // either into the shared partial block copies it. Errors: bad ids, swapped parent.
  Status fork(SeqId parent, SeqId child);
  // Keeps seq's first n_tokens tokens: frees blocks past them and unhashes a last
  // block that is no longer full (unless another table still holds it whole).
  // Errors: n_tokens would end in a released block (sliding window).
  Status truncate(SeqId seq, int64_t n_tokens);
  // Releases seq's blocks (hashed ones become cached free) or host slots.
  Status free(SeqId seq);

  bool can_swap_out(SeqId seq) const;
  // Moves seq to host slots; the caller copies each device block to its slot.
  StatusOr<std::vector<BlockSwap>> swap_out(SeqId seq);
  // Whether seq can come back and then append n_new tokens without CoW.
  bool can_swap_in(SeqId seq, int64_t n_new = 0) const;
  // Brings seq back; the caller copies each host slot to its device block. Full
  // blocks still in the prefix cache are shared instead of copied.
  StatusOr<std::vector<BlockSwap>> swap_in(SeqId seq);

  bool has_seq(SeqId seq) const { return seqs_.count(seq) != 0; }
  bool is_swapped(SeqId seq) const;
  // Reserved tokens of seq (0 for an unknown seq).
  int64_t n_tokens(SeqId seq) const;
  // seq's reserved tokens (empty if unknown).
  std::span<const int32_t> tokens(SeqId seq) const;
  // seq's device block ids in position order (empty if unknown or swapped);
  // leading entries may be kReleasedBlock (sliding window).
  std::span<const int32_t> block_table(SeqId seq) const;
  // Leading table entries of seq released (0 for an unknown seq).
  int64_t n_released(SeqId seq) const;
  int64_t n_seqs() const { return static_cast<int64_t>(seqs_.size()); }

  BlockStats stats() const;
  const BlockPool& pool() const { return pool_; }
  // The device pool's limit (BlockPool::set_limit): blocks past it are no
  // longer handed out; used ones there drain as their sequences free them.
  void set_block_limit(int64_t n_blocks) { pool_.set_limit(n_blocks); }

  // Blocks conserved (free + cached + used == total, each in one state), refcounts
  // equal the number of tables holding each block, every hash indexes a block
  // carrying it, each table's hashes chain over its tokens, tables have the right
  // length, a block sits at one position in every table, host slots conserved.
  Status check_invariants() const;

 private:
  struct SeqBlocks {
    std::vector<int32_t> tokens;      // reserved positions, in order
    std::vector<int32_t> table;       // device blocks; empty while swapped
    std::vector<int32_t> host_table;  // host slots; only while swapped (kReleasedBlock where released)
    std::vector<uint64_t> hashes;     // chained hashes of the leading full, computed blocks
    uint64_t root = kRootBlockHash;   // kv_prefix_root of the sequence's prefix key
    int64_t n_released = 0;           // leading entries released (sliding window)
    bool swapped = false;
  };

  // Matched blocks for `tokens` (see match_prefix), with their hashes.
  void match_blocks(std::span<const int32_t> tokens, uint64_t root, std::vector<int32_t>* blocks,
                    std::vector<uint64_t>* hashes) const;
  StatusOr<SeqBlocks*> find_device_seq(SeqId seq, const char* op);
  // Of n_matched prefix-cache blocks, the leading ones a window puts out of reach
  // of the first computed query (not taken by allocate()).
  int64_t skipped_prefix_blocks(int64_t n_matched) const;
  void release_device_blocks(SeqBlocks* s);
  // Releases s's held blocks wholly before position pos.
  void release_before(SeqBlocks* s, int64_t pos);

  int64_t block_size_;
  bool enable_prefix_caching_;
  int64_t window_;
  BlockPool pool_;
  std::vector<int32_t> host_free_;  // free host slots; back is taken first
  int64_t n_host_total_;
  std::unordered_map<SeqId, SeqBlocks> seqs_;
  int64_t n_prefix_queried_tokens_ = 0;
  int64_t n_prefix_hit_tokens_ = 0;
  int64_t n_cow_copies_ = 0;
  int64_t n_swapped_out_blocks_ = 0;
  int64_t n_swapped_in_blocks_ = 0;
};

}  // namespace sluice
