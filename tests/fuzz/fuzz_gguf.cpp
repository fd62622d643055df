// GGUF from a memory buffer: header, metadata, tensor directory and, when the
// input is long enough, the tensor data region. The parser reads no more than
// it is given, so the input is parsed once whole and once cut just before its
// data region (a header-only file must be refused or describe no data beyond it).
#include "format/gguf_reader.h"
#include "harnesses.h"
#include "quant/dtype.h"

namespace sluice::fuzz {
namespace {

// An accepted file: every tensor lies inside the buffer and has the size its
// type and shape imply; every metadata value can be summarized.
void check_model(const ModelFile& mf, const uint8_t* data, size_t size) {
  for (const std::string& key : mf.metadata.keys()) {
    const MetaValue* v = mf.metadata.find(key);
    FUZZ_CHECK(v != nullptr);
    (void)meta_value_summary(*v);
  }
  uint64_t total = 0;
  for (const TensorInfo& t : mf.tensors) {
    FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4);
    for (int64_t d : t.ne) FUZZ_CHECK(d >= 0);
    FUZZ_CHECK(t.n_bytes <= size);
    FUZZ_CHECK(t.data >= data && static_cast<size_t>(t.data - data) <= size - t.n_bytes);
    FUZZ_CHECK(t.n_bytes == row_bytes(t.type, t.ne[0]) * static_cast<uint64_t>(t.n_rows()));
    if (t.n_bytes > 0) {  // touch the ends: ASan reports a tensor that escapes
      volatile uint8_t first = t.data[0], last = t.data[t.n_bytes - 1];
      (void)first;
      (void)last;
    }
    (void)t.shape_string();
    total += t.n_bytes;
  }
  FUZZ_CHECK(total == mf.total_tensor_bytes());
}

}  // namespace

void fuzz_gguf(const uint8_t* data, size_t size) {
  StatusOr<ModelFile> mf = parse_gguf(data, size, "fuzz.gguf");
  if (!mf.ok()) {
    FUZZ_CHECK(!mf.status().message().empty());
    return;
  }
  check_model(*mf, data, size);
  // The same header without its data region.
  if (mf->tensors.empty() || mf->total_tensor_bytes() == 0) return;
  const TensorInfo* lowest = &mf->tensors[0];
  for (const TensorInfo& t : mf->tensors) {
    if (t.data < lowest->data) lowest = &t;
  }
  const size_t cut = static_cast<size_t>(lowest->data - data);
  StatusOr<ModelFile> head = parse_gguf(data, cut, "fuzz-head.gguf");
  if (head.ok()) check_model(*head, data, cut);
}

}  // namespace sluice::fuzz
