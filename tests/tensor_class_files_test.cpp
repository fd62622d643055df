// The classification of real GGUF files' tensors by role (arch/tensor_class.h)
// is the one the planner and the quant mixes made from fragments of tensor
// names before it: the old rules are kept here, as the yardstick, and every
// tensor of stories260K, stories-moe and the quant zoo is checked against them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "arch/tensor_class.h"
#include "base/test_data.h"
#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "plan/model_shape.h"
#include "plan/weight_bytes.h"

namespace sluice {
namespace {

using testing::model_path;

// The planner's former rule (plan/weight_bytes.cpp), by name fragments.
TensorClass class_by_name_fragments(const std::string& name) {
  if (name.rfind("token_embd", 0) == 0) return TensorClass::kEmbedding;
  if (name.rfind("output.", 0) == 0) return TensorClass::kOutput;
  if (name.find("_norm") != std::string::npos || name.find(".norm") != std::string::npos) return TensorClass::kNorm;
  if (name.find("ffn_gate_inp") != std::string::npos) return TensorClass::kRouter;
  if (name.find("_exps") != std::string::npos) return TensorClass::kExperts;
  if (name.find(".attn_") != std::string::npos) return TensorClass::kAttention;
  if (name.find(".ffn_") != std::string::npos) return TensorClass::kFfn;
  return TensorClass::kNorm;
}

// The quant mixes' former role string (quant/quant_mix.cpp): the name without
// "blk.N." and ".weight".
std::string mix_role_by_name(std::string_view name) {
  std::string_view role = name;
  if (role.ends_with(".weight")) role.remove_suffix(7);
  if (role.starts_with("blk.")) role = role.substr(role.find('.', 4) + 1);
  return std::string(role);
}

std::vector<std::string> real_gguf_files() {
  std::vector<std::string> files = {model_path("stories260K/stories260K.gguf"), model_path("stories-moe/stories-moe.gguf")};
  for (const char* q : {"f16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
                        "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_XS"})
    files.push_back(model_path(std::string("quant-zoo/tiny-") + q + ".gguf"));
  return files;
}

TEST(TensorClassOfRealFiles, IsThePlannersAndTheMixesFormerClassification) {
  SKIP_UNLESS_EXISTS(model_path("stories-moe/stories-moe.gguf"));
  int n_files = 0;
  bool saw_experts = false, saw_router = false;
  for (const std::string& path : real_gguf_files()) {
    SCOPED_TRACE(path);
    StatusOr<ModelFile> mf = read_gguf(path);
    ASSERT_TRUE(mf.ok()) << mf.status().to_string();
    const ArchSpec* arch = find_arch(mf->metadata.get_string("general.architecture").value_or(""));
    ASSERT_NE(arch, nullptr);
    for (const TensorInfo& t : mf->tensors) {
      const TensorSpec* spec = find_tensor_spec(arch, t.name);
      ASSERT_NE(spec, nullptr) << t.name << " is in no table";
      EXPECT_EQ(tensor_class(spec->role), class_by_name_fragments(t.name)) << t.name;
      EXPECT_EQ(tensor_role_name(spec->role), mix_role_by_name(t.name)) << t.name;
      saw_experts |= tensor_class(spec->role) == TensorClass::kExperts;
      saw_router |= tensor_class(spec->role) == TensorClass::kRouter;
    }
    // The planner's exact bytes by class add up to the file's.
    StatusOr<plan::ModelShape> shape = plan::shape_from_model_file(*mf);
    ASSERT_TRUE(shape.ok()) << shape.status().to_string();
    const plan::WeightBytes w = plan::weight_bytes_of_file(*mf, *shape);
    EXPECT_EQ(w.total(), mf->total_tensor_bytes());
    EXPECT_EQ(w.tied_embeddings, mf->find("output.weight") == nullptr);
    ++n_files;
  }
  EXPECT_EQ(n_files, 19);
  EXPECT_TRUE(saw_experts && saw_router);  // stories-moe's routed layers were among them
}

}  // namespace
}  // namespace sluice
