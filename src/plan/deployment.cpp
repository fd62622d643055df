#include "plan/deployment.h"

#include "base/check.h"

namespace sluice::plan {

double weight_bytes_per_device(double weight_bytes, int64_t tp, int64_t pp) {
  CHECK(tp >= 1 && pp >= 1);
  return weight_bytes / static_cast<double>(tp * pp);
}

StatusOr<AllReduceCost> tp_all_reduce(const AllReduceInputs& in) {
  if (in.tp < 1) return invalid_argument("tensor parallel degree must be at least 1");
  if (in.n_embd <= 0 || in.n_tokens <= 0 || !(in.bytes_per_elem > 0)) return invalid_argument("message size must be positive");
  if (!(in.link_gbps > 0)) return invalid_argument("interconnect bandwidth must be positive");
  AllReduceCost c;
  c.message_bytes = static_cast<double>(in.n_embd) * static_cast<double>(in.n_tokens) * in.bytes_per_elem;
  const double n = static_cast<double>(in.tp);
  c.per_all_reduce_s = 2.0 * (n - 1.0) / n * c.message_bytes / (in.link_gbps * 1e9);
  c.per_layer_s = 2.0 * c.per_all_reduce_s;
  return c;
}

double transfer_s(double bytes, double gbps) {
  CHECK(gbps > 0);
  return bytes / (gbps * 1e9);
}

StatusOr<double> cost_per_million_tokens(double price_per_hour, double tokens_per_s) {
  if (!(tokens_per_s > 0)) return invalid_argument("throughput must be positive to price a token");
  if (price_per_hour < 0) return invalid_argument("price must not be negative");
  return price_per_hour / (tokens_per_s * 3600.0) * 1e6;
}

}  // namespace sluice::plan
