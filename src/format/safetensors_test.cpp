#include "format/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "format/gguf_reader.h"
#include "format/hf_config.h"
#include "format/safetensors_header.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using testing::model_path;
using testing::shipped_model_path;

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& ts) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string text = h.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::string file(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(file.data(), &n, 8);
  file += text;
  for (const auto& t : ts) file.append(t.bytes.begin(), t.bytes.end());
  return std::vector<uint8_t>(file.begin(), file.end());
}

void write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
void write_file(const std::string& path, const std::string& s) { write_file(path, s.data(), s.size()); }

// f32 tensor whose element i is float(i + base).
StTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, float base = 0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) + base;
    std::memcpy(bytes.data() + i * 4, &v, 4);
  }
  return {name, "F32", std::move(shape), std::move(bytes)};
}

class HfDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("sluice_hf_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A 1-layer model: hidden 8, 2 heads (head_dim 4), 1 kv head, ffn 4, vocab 3.
  std::string config(const std::string& model_type, const std::string& extra = "") {
    return R"({"model_type": ")" + model_type + R"(", "hidden_size": 8, "intermediate_size": 4,
      "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
      "vocab_size": 3, "max_position_embeddings": 64, "rms_norm_eps": 1e-5)" + extra + "}";
  }
  std::vector<StTensor> tiny_tensors() {
    return {f32_tensor("model.embed_tokens.weight", {3, 8}),
            f32_tensor("model.norm.weight", {8}),
            f32_tensor("lm_head.weight", {3, 8}, 100),
            f32_tensor("model.layers.0.input_layernorm.weight", {8}),
            f32_tensor("model.layers.0.self_attn.q_proj.weight", {8, 8}),
            f32_tensor("model.layers.0.self_attn.k_proj.weight", {4, 8}),
            f32_tensor("model.layers.0.self_attn.v_proj.weight", {4, 8}),
            f32_tensor("model.layers.0.self_attn.o_proj.weight", {8, 8}),
            f32_tensor("model.layers.0.post_attention_layernorm.weight", {8}),
            f32_tensor("model.layers.0.mlp.gate_proj.weight", {4, 8}),
            f32_tensor("model.layers.0.mlp.up_proj.weight", {4, 8}),
            f32_tensor("model.layers.0.mlp.down_proj.weight", {8, 4})};
  }
  void write_model(const std::string& cfg, const std::vector<StTensor>& ts) {
    write_file(dir_ + "/config.json", cfg);
    const auto b = safetensors_bytes(ts);
    write_file(dir_ + "/model.safetensors", b.data(), b.size());
  }
  std::string dir_;
};

float at(const TensorInfo& t, int64_t i) {
  float v;
  std::memcpy(&v, t.data + i * 4, 4);
  return v;
}

TEST(HfModel, Stories260KMatchesGgufBytes) {
  const std::string hf = model_path("stories260K/hf");
  const std::string gguf = shipped_model_path("stories260K.gguf");
  SKIP_UNLESS_EXISTS(hf + "/model.safetensors");
  auto a = read_hf_model(hf);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = read_gguf(gguf);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(a->format, "safetensors");
  // Tied embeddings: every GGUF tensor but output.weight, with identical bytes.
  EXPECT_EQ(a->tensors.size(), b->tensors.size() - 1);
  EXPECT_EQ(a->find("output.weight"), nullptr);
  for (const TensorInfo& t : a->tensors) {
    const TensorInfo* g = b->find(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(t.type, g->type) << t.name;
    EXPECT_EQ(t.ne, g->ne) << t.name;
    ASSERT_EQ(t.n_bytes, g->n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, g->data, t.n_bytes), 0) << t.name << " bytes differ";
  }
  // The un-permuted tensors are owned; untouched ones are borrowed from the file.
  EXPECT_EQ(a->find("blk.0.attn_q.weight")->file_offset, -1);
  EXPECT_GT(a->find("blk.0.attn_v.weight")->file_offset, 0);
  // Tensor order follows the GGUF file's (which lacks only output.weight here).
  std::vector<std::string> gguf_order;
  for (const auto& t : b->tensors) if (t.name != "output.weight") gguf_order.push_back(t.name);
  std::vector<std::string> hf_order;
  for (const auto& t : a->tensors) hf_order.push_back(t.name);
  std::vector<std::string> sorted_g = gguf_order, sorted_h = hf_order;
  std::sort(sorted_g.begin(), sorted_g.end());
  std::sort(sorted_h.begin(), sorted_h.end());
  EXPECT_EQ(sorted_g, sorted_h);

  // Every llama.* hyper-parameter of the GGUF is present with the same type and value.
  int compared = 0;
  for (const std::string& key : b->metadata.keys()) {
    if (key.rfind("llama.", 0) != 0 || key == "llama.context_length") continue;
    const MetaValue* va = a->metadata.find(key);
    ASSERT_NE(va, nullptr) << key;
    EXPECT_EQ(va->type, b->metadata.find(key)->type) << key;
    const MetaValue* vb = b->metadata.find(key);
    EXPECT_EQ(a->metadata.get_int(key), b->metadata.get_int(key)) << key;
    EXPECT_EQ(a->metadata.get_float(key), b->metadata.get_float(key)) << key;
    EXPECT_EQ(va->value.index(), vb->value.index()) << key;
    ++compared;
  }
  EXPECT_EQ(compared, 7);
  EXPECT_EQ(a->metadata.get_string("general.architecture"), "llama");
  EXPECT_EQ(a->metadata.get_int("llama.context_length"), 512);
  EXPECT_EQ(a->metadata.get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(a->metadata.get_int("llama.attention.key_length"), 8);
  EXPECT_EQ(a->metadata.get_int("llama.vocab_size"), 512);
}

TEST_F(HfDir, MapsNamesShapesAndUnpermutesQK) {
  write_model(config("llama"), tiny_tensors());
  auto mf = read_hf_model(dir_);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  ASSERT_EQ(mf->tensors.size(), 12u);
  EXPECT_EQ(mf->tensors[0].name, "token_embd.weight");
  EXPECT_EQ(mf->tensors[1].name, "output_norm.weight");
  EXPECT_EQ(mf->tensors[2].name, "output.weight");
  EXPECT_EQ(mf->tensors[3].name, "blk.0.attn_norm.weight");
  const TensorInfo* down = mf->find("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne, (std::vector<int64_t>{4, 8}));
  const TensorInfo* o = mf->find("blk.0.attn_output.weight");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(at(*o, 9), 9.0f);  // not permuted
  EXPECT_EQ(at(*mf->find("output.weight"), 0), 100.0f);

  // q: 2 heads x head_dim 4, rows of 8. HF rows per head [r0 r2 | r1 r3] -> GGUF
  // rows [r0 r1 r2 r3]: GGUF row h*4 + 2i + p comes from HF row h*4 + 2p + i.
  const TensorInfo* q = mf->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  const int64_t want_q_rows[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(at(*q, r * 8 + c), want_q_rows[r] * 8 + c);
  }
  const TensorInfo* k = mf->find("blk.0.attn_k.weight");  // 1 kv head of 4 rows
  ASSERT_NE(k, nullptr);
  const int64_t want_k_rows[4] = {0, 2, 1, 3};
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(at(*k, r * 8), want_k_rows[r] * 8);
  EXPECT_EQ(q->file_offset, -1);

  EXPECT_EQ(mf->metadata.get_int("llama.attention.head_count_kv"), 1);
  EXPECT_EQ(mf->metadata.get_int("llama.rope.dimension_count"), 4);
  EXPECT_FALSE(mf->metadata.has("llama.attention.key_length"));
  EXPECT_EQ(mf->metadata.find("llama.block_count")->type, GgufType::kUint32);
  EXPECT_EQ(mf->metadata.find("llama.attention.layer_norm_rms_epsilon")->type, GgufType::kFloat32);
}

TEST_F(HfDir, Qwen2KeepsLayoutAndBiases) {
  auto ts = tiny_tensors();
  ts.push_back(f32_tensor("model.layers.0.self_attn.q_proj.bias", {8}));
  ts.push_back(f32_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", {2}));
  write_model(config("qwen2", R"(, "rope_theta": 1000000.0, "tie_word_embeddings": false)"), ts);
  auto mf = read_hf_model(dir_);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->metadata.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(mf->metadata.get_float("qwen2.rope.freq_base"), 1000000.0);
  const TensorInfo* q = mf->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(at(*q, i), static_cast<float>(i));
  const TensorInfo* qb = mf->find("blk.0.attn_q.bias");
  ASSERT_NE(qb, nullptr);
  EXPECT_EQ(qb->ne, (std::vector<int64_t>{8}));
  EXPECT_EQ(mf->tensors.size(), 13u);  // inv_freq dropped
}

TEST_F(HfDir, TiedEmbeddingsDropLmHead) {
  write_model(config("mistral", R"(, "tie_word_embeddings": true, "head_dim": 4)"), tiny_tensors());
  auto mf = read_hf_model(dir_);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->find("output.weight"), nullptr);
  EXPECT_EQ(mf->metadata.get_string("general.architecture"), "llama");
  EXPECT_EQ(mf->metadata.get_int("llama.attention.key_length"), 4);
  EXPECT_EQ(mf->metadata.get_int("llama.attention.value_length"), 4);
}

TEST_F(HfDir, ShardedCheckpoint) {
  auto ts = tiny_tensors();
  std::vector<StTensor> a(ts.begin(), ts.begin() + 5), b(ts.begin() + 5, ts.end());
  write_file(dir_ + "/config.json", config("llama"));
  const auto ba = safetensors_bytes(a), bb = safetensors_bytes(b);
  write_file(dir_ + "/model-00001-of-00002.safetensors", ba.data(), ba.size());
  write_file(dir_ + "/model-00002-of-00002.safetensors", bb.data(), bb.size());
  nlohmann::json index;
  for (const auto& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write_file(dir_ + "/model.safetensors.index.json", index.dump());
  auto mf = read_hf_model(dir_);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->tensors.size(), 12u);
  EXPECT_EQ(at(*mf->find("blk.0.ffn_up.weight"), 5), 5.0f);

  index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  write_file(dir_ + "/model.safetensors.index.json", index.dump());
  auto bad = read_hf_model(dir_);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("up_proj"), std::string::npos) << bad.status().message();

  index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = "../evil.safetensors";
  write_file(dir_ + "/model.safetensors.index.json", index.dump());
  EXPECT_EQ(read_hf_model(dir_).status().code(), StatusCode::kDataLoss);
}

TEST_F(HfDir, RefusesUnsupported) {
  write_model(config("gpt2"), tiny_tensors());
  auto r = read_hf_model(dir_);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("gpt2"), std::string::npos);

  auto ts = tiny_tensors();
  ts[1].dtype = "I32";
  write_model(config("llama"), ts);
  r = read_hf_model(dir_);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("I32"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("model.norm.weight"), std::string::npos);

  ts = tiny_tensors();
  ts.push_back(f32_tensor("vision_tower.proj.weight", {2}));
  write_model(config("llama"), ts);
  r = read_hf_model(dir_);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("vision_tower.proj.weight"), std::string::npos);

  write_model(config("llama", R"(, "rope_scaling": {"type": "yarn", "factor": 4.0})"), tiny_tensors());
  r = read_hf_model(dir_);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("yarn"), std::string::npos);

  ts = tiny_tensors();
  ts.erase(ts.begin() + 2);  // no lm_head, not tied
  write_model(config("llama"), ts);
  EXPECT_EQ(read_hf_model(dir_).status().code(), StatusCode::kDataLoss);

  EXPECT_EQ(read_hf_model(dir_ + "/nope").status().code(), StatusCode::kNotFound);
}

TEST(HfConfig, RopeScaling) {
  const std::string base = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 4,
      "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": 3,
      "max_position_embeddings": 64, )";
  auto lin = parse_hf_config(base + R"("rope_scaling": {"type": "linear", "factor": 2.0}})", "c", "m");
  ASSERT_TRUE(lin.ok()) << lin.status().to_string();
  EXPECT_EQ(lin->metadata.get_string("llama.rope.scaling.type"), "linear");
  EXPECT_EQ(lin->metadata.get_float("llama.rope.scaling.factor"), 2.0);
  EXPECT_EQ(lin->metadata.get_int("llama.attention.head_count_kv"), 8);
  EXPECT_EQ(lin->metadata.get_int("llama.rope.dimension_count"), 8);
  EXPECT_EQ(lin->metadata.get_string("general.name"), "m");

  auto l3 = parse_hf_config(base + R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}})", "c", "m");
  ASSERT_TRUE(l3.ok()) << l3.status().to_string();
  const Metadata& md = l3->metadata;
  EXPECT_EQ(md.get_string("llama.rope.scaling.type"), "llama3");
  EXPECT_EQ(md.get_float("llama.rope.scaling.factor"), 8.0);
  EXPECT_EQ(md.get_float("llama.rope.scaling.low_freq_factor"), 1.0);
  EXPECT_EQ(md.get_float("llama.rope.scaling.high_freq_factor"), 4.0);
  EXPECT_EQ(md.get_int("llama.rope.scaling.original_context_length"), 8192);
  EXPECT_EQ(md.find("llama.rope.scaling.original_context_length")->type, GgufType::kUint32);

  auto missing = parse_hf_config(R"({"model_type": "llama"})", "c", "m");
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("max_position_embeddings"), std::string::npos);
  EXPECT_EQ(parse_hf_config("{not json", "c", "m").status().code(), StatusCode::kDataLoss);
  auto neg = parse_hf_config(base + R"("num_key_value_heads": -3})", "c", "m");
  EXPECT_EQ(neg.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(neg.status().message().find("-3"), std::string::npos);
}

// Mistral v0.1 writes its window; v0.2+ writes null; qwen2-style configs turn it off.
TEST(HfConfig, SlidingWindowOfMistralAndLlama) {
  const std::string base = R"({"hidden_size": 64, "intermediate_size": 4, "num_hidden_layers": 1,
      "num_attention_heads": 8, "vocab_size": 3, "max_position_embeddings": 64, )";
  auto v01 = parse_hf_config(base + R"("model_type": "mistral", "sliding_window": 4096})", "c", "m");
  ASSERT_TRUE(v01.ok()) << v01.status().to_string();
  EXPECT_EQ(v01->metadata.get_int("llama.attention.sliding_window"), 4096);
  EXPECT_EQ(v01->metadata.find("llama.attention.sliding_window")->type, GgufType::kUint32);
  auto v02 = parse_hf_config(base + R"("model_type": "mistral", "sliding_window": null})", "c", "m");
  ASSERT_TRUE(v02.ok());
  EXPECT_FALSE(v02->metadata.get_int("llama.attention.sliding_window").has_value());
  auto off = parse_hf_config(base + R"("model_type": "llama", "sliding_window": 32, "use_sliding_window": false})",
                             "c", "m");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->metadata.get_int("llama.attention.sliding_window").has_value());
  auto bad = parse_hf_config(base + R"("model_type": "mistral", "sliding_window": -1})", "c", "m");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("sliding_window"), std::string::npos);
}

std::vector<uint8_t> with_header(const std::string& json, size_t data_bytes) {
  std::string file(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(file.data(), &n, 8);
  file += json;
  file.append(data_bytes, '\0');
  return std::vector<uint8_t>(file.begin(), file.end());
}

void expect_header_error(const std::vector<uint8_t>& b, std::initializer_list<const char*> words) {
  auto r = parse_safetensors_header(b.data(), b.size(), "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  for (const char* w : words) {
    EXPECT_NE(r.status().message().find(w), std::string::npos)
        << "'" << w << "' missing from: " << r.status().message();
  }
}

TEST(SafetensorsHeader, ValidatesEverything) {
  auto ok = with_header(R"({"a": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}})", 12);
  auto r = parse_safetensors_header(ok.data(), ok.size(), "x");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*r)[0].offset, ok.size() - 12);

  std::vector<uint8_t> lying = ok;
  const uint64_t huge = 1u << 20;
  std::memcpy(lying.data(), &huge, 8);
  expect_header_error(lying, {"header length 1048576"});
  expect_header_error({1, 2, 3}, {"too short"});
  expect_header_error(with_header(R"({"a": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}})", 11),
                      {"'a'", "[0, 12]"});
  expect_header_error(with_header(R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 12]}})", 12),
                      {"'a'", "12 bytes"});
  expect_header_error(with_header(R"({"a": {"dtype": "F16", "shape": [2, -3], "data_offsets": [0, 12]}})", 12),
                      {"'a'", "shape"});
  expect_header_error(with_header(R"({"a": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 12]}})", 12),
                      {"'a'", "Q9"});
  expect_header_error(with_header(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                      "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})", 6),
                      {"overlaps"});
  expect_header_error(with_header(R"([1, 2])", 0), {"not a JSON object"});
  expect_header_error(with_header(R"({"a": )", 0), {"not valid JSON"});
}

}  // namespace
}  // namespace sluice
