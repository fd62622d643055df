// TensorClass (tensor_class.h): every role's class, and the lookup of GGUF
// names through the architecture tables.
#include "arch/tensor_class.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace sluice {
namespace {

using C = TensorClass;
using R = TensorRole;

TEST(TensorClass, EveryRoleHasItsClass) {
  struct Want {
    R role;
    C cls;
  };
  const Want want[] = {
      {R::kTokenEmbd, C::kEmbedding},     {R::kOutputNorm, C::kNorm},         {R::kOutput, C::kOutput},
      {R::kRopeFreqs, C::kNorm},          {R::kRopeFactorsLong, C::kNorm},    {R::kRopeFactorsShort, C::kNorm},
      {R::kAttnNorm, C::kNorm},           {R::kAttnQ, C::kAttention},         {R::kAttnK, C::kAttention},
      {R::kAttnV, C::kAttention},         {R::kAttnOutput, C::kAttention},    {R::kAttnQBias, C::kAttention},
      {R::kAttnKBias, C::kAttention},     {R::kAttnVBias, C::kAttention},     {R::kAttnQNorm, C::kNorm},
      {R::kAttnKNorm, C::kNorm},          {R::kAttnQkv, C::kAttention},       {R::kAttnPostNorm, C::kNorm},
      {R::kFfnNorm, C::kNorm},            {R::kFfnGate, C::kFfn},             {R::kFfnUp, C::kFfn},
      {R::kFfnDown, C::kFfn},             {R::kFfnGateUp, C::kFfn},           {R::kFfnPostNorm, C::kNorm},
      {R::kFfnRouter, C::kRouter},        {R::kFfnGateExps, C::kExperts},     {R::kFfnUpExps, C::kExperts},
      {R::kFfnDownExps, C::kExperts},     {R::kFfnSharedGate, C::kRouter},    {R::kFfnGateShexp, C::kFfn},
      {R::kFfnUpShexp, C::kFfn},          {R::kFfnDownShexp, C::kFfn},
  };
  ASSERT_EQ(std::size(want), static_cast<size_t>(kNumTensorRoles));  // a new role needs a row here
  for (int i = 0; i < kNumTensorRoles; ++i) {
    EXPECT_EQ(want[i].role, static_cast<R>(i)) << "rows in role order";
    EXPECT_EQ(tensor_class(want[i].role), want[i].cls) << tensor_role_name(want[i].role);
  }
}

TEST(TensorClass, EveryClassHasADistinctName) {
  std::set<std::string> names;
  for (int c = 0; c < kNumTensorClasses; ++c) {
    const std::string n = tensor_class_name(static_cast<C>(c));
    EXPECT_NE(n, "?");
    EXPECT_TRUE(names.insert(n).second) << n;
  }
}

TEST(TensorClass, EveryTableRowClassifiesByItsOwnName) {
  for (const ArchSpec* a : supported_archs())
    for (const TensorSpec& t : a->tensors) {
      const std::string name = gguf_tensor_name(t, 3);
      const TensorSpec* found = find_tensor_spec(a, name);
      ASSERT_NE(found, nullptr) << a->name << " " << name;
      EXPECT_EQ(found->role, t.role) << a->name << " " << name;
      EXPECT_EQ(tensor_class_of(a, name), tensor_class(t.role)) << a->name << " " << name;
    }
}

TEST(TensorClass, NamesOutsideTheTables) {
  const ArchSpec* llama = find_arch("llama");
  ASSERT_NE(llama, nullptr);
  // Of another architecture's table: found there (qwen2moe's shared expert).
  const TensorSpec* shexp = find_tensor_spec(llama, "blk.0.ffn_down_shexp.weight");
  ASSERT_NE(shexp, nullptr);
  EXPECT_EQ(shexp->role, R::kFfnDownShexp);
  // No architecture at all (a file sluice does not run): any table.
  EXPECT_EQ(tensor_class_of(nullptr, "blk.7.attn_q.weight"), C::kAttention);
  EXPECT_EQ(tensor_class_of(nullptr, "output.weight"), C::kOutput);
  // Names no table has count with the norms; per-layer names need a layer.
  EXPECT_EQ(find_tensor_spec(llama, "blk.0.attn_kv_a_mqa.weight"), nullptr);
  EXPECT_EQ(tensor_class_of(llama, "blk.0.attn_kv_a_mqa.weight"), C::kNorm);
  EXPECT_EQ(find_tensor_spec(llama, "attn_q.weight"), nullptr);
  EXPECT_EQ(find_tensor_spec(llama, "blk.x.attn_q.weight"), nullptr);
}

}  // namespace
}  // namespace sluice
