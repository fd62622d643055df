#include "tokenizer/byte_trie.h"

namespace sluice {

void ByteTrie::insert(std::string_view key, int32_t value) {
  int32_t node = root();
  for (const char c : key) {
    const uint64_t k = edge_key(node, static_cast<uint8_t>(c));
    const auto it = edges_.find(k);
    if (it != edges_.end()) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(values_.size());
      values_.push_back(-1);
      edges_.emplace(k, next);
      node = next;
    }
  }
  if (node != root()) values_[node] = value;
}

}  // namespace sluice
