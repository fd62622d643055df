// ByteTrie: a prefix tree over byte strings with an int32 value per key, for the
// longest-match walks of the unigram ("t5") and RWKV tokenizers.
//
//   keys "a"=1, "ab"=2, "b"=3:    root -a-> n1(1) -b-> n2(2)
//                                 root -b-> n3(3)
//
// Walk from root() with child(); value() is the key ending at that node, or -1.
// Built once, then immutable: concurrent reads are safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

class ByteTrie {
 public:
  ByteTrie() : values_(1, -1) {}

  // Adds `key` (non-empty) with `value` >= 0; a key added again takes the new value.
  void insert(std::string_view key, int32_t value);

  static constexpr int32_t root() { return 0; }
  // The node reached from `node` by byte `b`, or -1.
  int32_t child(int32_t node, uint8_t b) const {
    const auto it = edges_.find(edge_key(node, b));
    return it == edges_.end() ? -1 : it->second;
  }
  // The value of the key that ends at `node`, or -1.
  int32_t value(int32_t node) const { return values_[node]; }
  bool empty() const { return values_.size() == 1; }

 private:
  static uint64_t edge_key(int32_t node, uint8_t b) { return (static_cast<uint64_t>(node) << 8) | b; }

  std::unordered_map<uint64_t, int32_t> edges_;  // (node, byte) -> node
  std::vector<int32_t> values_;                  // [n_nodes]
};

}  // namespace sluice
