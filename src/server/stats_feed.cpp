#include "server/stats_feed.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sluice::server {
namespace {

using ojson = nlohmann::ordered_json;

// One series copied out of the registry (the visit holds its lock). Its
// name and labels are the registry's own strings, not copies: a series is
// never removed, and its strings stay where they are for the registry's life.
struct Row {
  const std::string& name;
  const std::string& labels;
  MetricKind kind;
  double value = 0;                 // counter, gauge; histogram: count
  double sum = 0, p50 = 0, p90 = 0, p99 = 0;  // histograms
};

std::string key(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}

// Compact JSON text (invalid UTF-8, as a model's description may hold, replaced).
std::string dump_text(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// A number JSON can hold (NaN and infinities become 0).
double finite(double v) { return std::isfinite(v) ? v : 0.0; }

// The leg a byte series measures, by its name and labels; "" if it is not one.
std::string leg_of(const Row& r, const std::map<std::string, std::string>& l) {
  auto label = [&](const char* k) {
    auto it = l.find(k);
    return it == l.end() ? std::string() : it->second;
  };
  if (r.name == "sluice_weight_read_bytes") return label("tier") == "disk" ? "disk -> ram (layers)" : "ram -> compute (layers)";
  if (r.name == "sluice_expert_read_bytes") return label("tier") == "disk" ? "disk -> slots (experts)" : "slots -> compute (experts)";
  if (r.name == "sluice_dist_bytes_sent_total") return "rank " + label("link");
  if (r.kind == MetricKind::kCounter && r.name.find("bytes") != std::string::npos) return r.name;
  return "";
}

}  // namespace

std::map<std::string, std::string> parse_labels(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t eq = s.find('=', i);
    if (eq == std::string::npos || eq + 1 >= s.size() || s[eq + 1] != '"') break;
    std::string k = s.substr(i, eq - i), v;
    size_t j = eq + 2;
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) {
        ++j;
        v += s[j] == 'n' ? '\n' : s[j];
      } else {
        v += s[j];
      }
    }
    out[std::move(k)] = std::move(v);
    i = j + 1;
    if (i < s.size() && s[i] == ',') ++i;
  }
  return out;
}

StatsFeed::StatsFeed(MetricRegistry& registry, double min_window_s)
    : registry_(registry), min_window_s_(min_window_s) {}

std::map<std::string, double> StatsFeed::rates(const Sample& now, double* window_s, std::vector<double>* routed_per_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_.t < 0 || now.t - last_.t >= min_window_s_) {
    base_ = std::move(last_);
    last_ = now;
  }
  std::map<std::string, double> out;
  *window_s = base_.t < 0 ? 0.0 : now.t - base_.t;
  routed_per_s->assign(now.routed.size(), 0.0);
  if (*window_s <= 0) return out;
  for (const auto& [k, v] : now.values) {
    auto it = base_.values.find(k);
    out[k] = (v - (it == base_.values.end() ? 0.0 : it->second)) / *window_s;
  }
  const bool base_cells = base_.routed.size() == now.routed.size();  // else none yet: from 0
  for (size_t i = 0; i < now.routed.size(); ++i)
    (*routed_per_s)[i] = (now.routed[i] - (base_cells ? base_.routed[i] : 0.0)) / *window_s;
  return out;
}

std::string StatsFeed::snapshot_text(const std::string& model_json) {
  ojson model = model_json.empty() ? ojson::object() : ojson::parse(model_json, nullptr, false);
  if (model.is_discarded()) model = ojson::object();
  const int64_t n_layer = model.value("n_layer", int64_t{0}), n_expert = model.value("n_expert", int64_t{0});
  const bool routed_model = n_expert > 0 && n_layer > 0;

  // The per-expert families are read by cell (ExpertCells), every other series into `rows`.
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  cells_.read(registry_, routed_model ? n_layer : 0, routed_model ? n_expert : 0);
  const ExpertCells& cells = cells_;
  std::vector<Row> rows;
  registry_.visit(
      [&](const MetricSeries& s) {
        Row r{.name = s.name, .labels = s.labels, .kind = s.kind, .value = s.value};
        if (s.histogram) {
          r.sum = s.histogram->sum();
          if (s.histogram->count() > 0) {
            r.p50 = s.histogram->quantile(0.5);
            r.p90 = s.histogram->quantile(0.9);
            r.p99 = s.histogram->quantile(0.99);
          }
        }
        rows.push_back(std::move(r));
      },
      [](const std::string& name) { return !ExpertCells::holds(name); });

  const auto steady = std::chrono::steady_clock::now();
  Sample now{.t = std::chrono::duration<double>(steady.time_since_epoch()).count()};
  for (const Row& r : rows) {
    if (r.kind == MetricKind::kHistogram) {
      now.values[key(r.name + "_sum", r.labels)] = r.sum;
      now.values[key(r.name + "_count", r.labels)] = r.value;
    } else if (r.kind == MetricKind::kCounter || r.name.ends_with("_read_bytes")) {
      now.values[key(r.name, r.labels)] = r.value;  // counters, and the gauges that only grow
    }
  }
  const ExpertCells::Matrix* routed_cells = cells.find("sluice_expert_routed_total");
  if (routed_cells) now.routed = routed_cells->value;
  double window_s = 0;
  std::vector<double> routed_per_s;
  const std::map<std::string, double> per_s = rates(now, &window_s, &routed_per_s);
  auto rate = [&](const std::string& k) {
    auto it = per_s.find(k);
    return it == per_s.end() ? 0.0 : finite(it->second);
  };
  std::map<std::string, const Row*> by_key;
  for (const Row& r : rows) by_key[key(r.name, r.labels)] = &r;
  auto value = [&](const std::string& name, const std::string& labels = "") {
    auto it = by_key.find(key(name, labels));
    return it == by_key.end() ? 0.0 : finite(it->second->value);
  };

  ojson j;
  j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  j["uptime_s"] = std::chrono::duration<double>(steady - start_).count();
  j["rate_window_s"] = window_s;
  j["model"] = std::move(model);

  ojson finished = ojson::object();
  for (const char* o : {"stop", "length", "abort", "error"})
    finished[o] = value("sluice_requests_total", std::string("outcome=\"") + o + "\"");
  j["requests"] = {{"running", value("sluice_requests_running")},
                   {"waiting", value("sluice_requests_waiting")},
                   {"swapped", value("sluice_requests_swapped")},
                   {"http_in_flight", value("sluice_server_http_in_flight")},
                   {"finished", finished}};
  j["kv"] = {{"blocks_used", value("sluice_kv_blocks_used")},
             {"blocks_total", value("sluice_kv_blocks_total")},
             {"blocks_cached", value("sluice_kv_blocks_cached")},
             {"prefix_hit_ratio", value("sluice_prefix_cache_hit_ratio")},
             {"preemptions", value("sluice_preemptions_total")},
             {"fluid_units", value("sluice_fluid_demoted_units")},
             {"fluid_demotions", value("sluice_fluid_demotions")},
             {"fluid_promotions", value("sluice_fluid_promotions")},
             {"preemptions_per_s", rate("sluice_preemptions_total")}};
  j["throughput"] = {{"generated_tokens", value("sluice_generated_tokens_total")},
                     {"tokens_per_s", rate("sluice_generated_tokens_total")},
                     {"requests_per_s", rate("sluice_e2e_seconds_count")}};
  ojson latency = ojson::object();
  for (const char* h : {"ttft", "tpot", "e2e"}) {
    const std::string name = std::string("sluice_") + h + "_seconds";
    auto it = by_key.find(name);
    ojson l = {{"count", 0}, {"mean", 0}, {"p50", 0}, {"p90", 0}, {"p99", 0}, {"recent_mean", 0}};
    if (it != by_key.end() && it->second->value > 0) {
      const Row& r = *it->second;
      const double dn = rate(name + "_count");
      l = {{"count", r.value},        {"mean", finite(r.sum / r.value)}, {"p50", finite(r.p50)},
           {"p90", finite(r.p90)},    {"p99", finite(r.p99)},
           {"recent_mean", dn > 0 ? finite(rate(name + "_sum") / dn) : 0.0}};
    }
    latency[std::string(h) + "_s"] = l;
  }
  j["latency"] = latency;

  ojson legs = ojson::array();
  for (const Row& r : rows) {
    if (r.kind == MetricKind::kHistogram) continue;
    if (r.kind != MetricKind::kCounter && r.name != "sluice_weight_read_bytes" && r.name != "sluice_expert_read_bytes")
      continue;  // not a leg (leg_of), and its labels need not be parsed
    const auto labels = parse_labels(r.labels);
    const std::string leg = leg_of(r, labels);
    if (leg.empty()) continue;
    legs.push_back({{"leg", leg}, {"series", r.name}, {"labels", labels}, {"bytes", finite(r.value)},
                    {"bytes_per_s", rate(key(r.name, r.labels))}});
  }
  j["legs"] = legs;
  j["weights"] = {{"stall_s", value("sluice_weight_stall_seconds")},
                  {"overlap_efficiency", value("sluice_weight_overlap_efficiency")},
                  {"resident_fraction", value("sluice_weight_resident_fraction")}};

  // Experts: the routed-count matrix, the per-layer cache figures and the
  // per-expert ones, written as text (ExpertCells::write) after the rest.
  std::string experts;
  if (routed_model) {
    ojson layers = ojson::array();
    for (int64_t l = 0; l < n_layer; ++l) {
      const std::string ll = "layer=\"" + std::to_string(l) + "\"";
      if (by_key.count(key("sluice_experts_resident", ll))) {
        layers.push_back({{"layer", l},
                          {"resident", value("sluice_experts_resident", ll)},
                          {"recall", value("sluice_expert_recall", ll)},
                          {"precision", value("sluice_expert_precision", ll)},
                          {"hit_rate", value("sluice_expert_hit_rate", ll)}});
      }
    }
    experts.reserve(static_cast<size_t>(n_layer * n_expert) * 8 * 4 + 4096);  // 8 matrices, ~4 characters a cell
    experts += fmt::format("{{\"n_layer\":{},\"n_expert\":{},\"routed\":", n_layer, n_expert);
    cells.write(experts, routed_cells);
    experts += ",\"routed_per_s\":";
    cells.write(experts, routed_cells, &routed_per_s);
    experts += ",\"layers\":" + dump_text(layers);
    // Per expert, when experts stream: the matrices of what the store counted.
    const ExpertCells::Matrix* resident = cells.find("sluice_expert_resident");
    bool per_expert = false;
    for (int64_t l = 0; resident && l < n_layer && !per_expert; ++l)
      per_expert = resident->present[static_cast<size_t>(l * n_expert)] != 0;
    if (per_expert) {
      const ExpertCells::Matrix* chosen = cells.find("sluice_expert_predicted", ",routed=\"yes\"");
      const ExpertCells::Matrix* not_chosen = cells.find("sluice_expert_predicted", ",routed=\"no\"");
      std::vector<double> predicted(static_cast<size_t>(n_layer * n_expert), 0.0);  // chosen + not chosen
      for (const ExpertCells::Matrix* m : {chosen, not_chosen})
        for (size_t i = 0; m && i < predicted.size(); ++i)
          if (m->present[i]) predicted[i] += finite(m->value[i]);
      const std::pair<const char*, const ExpertCells::Matrix*> matrices[] = {
          {"resident", resident},
          {"ready", cells.find("sluice_expert_chosen", ",readiness=\"ready\"")},
          {"late", cells.find("sluice_expert_chosen", ",readiness=\"late\"")},
          {"missed", cells.find("sluice_expert_chosen", ",readiness=\"missed\"")}};
      experts += ",\"per_expert\":{";
      for (const auto& [name, m] : matrices) {
        experts += fmt::format("\"{}\":", name);
        cells.write(experts, m);
        experts += ',';
      }
      experts += "\"predicted\":";
      cells.write(experts, chosen, &predicted);
      experts += ",\"predicted_chosen\":";
      cells.write(experts, chosen);
      experts += '}';
    }
    experts += '}';
  }
  ojson tail;
  tail["speculative"] = {{"drafted", value("sluice_spec_draft_tokens_total")},
                      {"accepted", value("sluice_spec_accepted_tokens_total")},
                      {"acceptance_rate", value("sluice_spec_acceptance_rate")},
                      {"tokens_per_pass", value("sluice_spec_tokens_per_pass")}};

  // Everything else, as /metrics has it (the per-expert matrices are above).
  ojson all = ojson::object();
  for (const Row& r : rows) {
    ojson e = {{"labels", parse_labels(r.labels)}};
    if (r.kind == MetricKind::kHistogram) {
      e["count"] = r.value;
      e["sum"] = finite(r.sum);
      e["p50"] = finite(r.p50);
      e["p90"] = finite(r.p90);
      e["p99"] = finite(r.p99);
    } else {
      e["value"] = finite(r.value);
    }
    all[r.name].push_back(std::move(e));
  }
  tail["metrics"] = all;

  // {head..., "experts": {...}, tail...}: the objects' text joined at their braces.
  std::string out = dump_text(j);
  const std::string rest = dump_text(tail);
  out.reserve(out.size() + experts.size() + rest.size() + 16);
  if (!experts.empty()) {
    out.pop_back();
    out += ",\"experts\":";
    out += experts;
    out += '}';
  }
  out.pop_back();
  out += ',';
  out.append(rest, 1, std::string::npos);
  return out;
}

ojson StatsFeed::snapshot(const std::string& model_json) { return ojson::parse(snapshot_text(model_json)); }

}  // namespace sluice::server
