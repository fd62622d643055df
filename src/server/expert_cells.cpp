#include "server/expert_cells.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace sluice::server {
namespace {

// `layer="L",expert="E"` followed by `extra` (",readiness=\"ready\"", ...) as
// the engine writes them: L and E, or false.
bool parse_expert_cell(const std::string& labels, int64_t* layer, int64_t* expert, std::string_view* extra) {
  auto number = [&](size_t* i, const char* prefix, int64_t* out) {
    const size_t n = std::strlen(prefix);
    if (labels.compare(*i, n, prefix) != 0) return false;
    *i += n;
    const size_t start = *i;
    int64_t v = 0;
    for (; *i < labels.size() && labels[*i] >= '0' && labels[*i] <= '9' && *i - start < 12; ++*i)
      v = v * 10 + (labels[*i] - '0');
    if (*i == start || *i >= labels.size() || labels[*i] != '"') return false;
    ++*i;
    *out = v;
    return true;
  };
  size_t i = 0;
  if (!number(&i, "layer=\"", layer) || !number(&i, ",expert=\"", expert)) return false;
  *extra = std::string_view(labels).substr(i);
  return true;
}

}  // namespace

bool ExpertCells::holds(const std::string& name) {
  return name == "sluice_expert_routed_total" || name == "sluice_expert_resident" || name == "sluice_expert_chosen" ||
         name == "sluice_expert_predicted";
}

ExpertCells::Family& ExpertCells::family(const std::string& name, std::string_view extra) {
  // A family's series come together, alternating between few extras (readiness, routed).
  auto is = [&](const Family& f) { return f.name == name && f.extra == extra; };
  if (last_ < families_.size() && is(families_[last_])) return families_[last_];
  for (last_ = 0; last_ < families_.size(); ++last_)
    if (is(families_[last_])) return families_[last_];
  const size_t n = static_cast<size_t>(n_layer_ * n_expert_);
  families_.push_back({name, std::string(extra), {}, {}, {std::vector<double>(n, 0.0), std::vector<uint8_t>(n, 0)}});
  return families_.back();
}

void ExpertCells::index(const MetricRegistry& registry) {
  // Read the count first: a series created during the walk makes the next read() walk again.
  indexed_series_ = registry.series_count();
  families_.clear();
  last_ = 0;
  const size_t n = static_cast<size_t>(n_layer_ * n_expert_);
  registry.visit(
      [&](const MetricSeries& s) {
        int64_t l = 0, e = 0;
        std::string_view extra;
        if (!parse_expert_cell(s.labels, &l, &e, &extra) || l >= n_layer_ || e >= n_expert_) return;
        Family& f = family(s.name, extra);
        const size_t i = static_cast<size_t>(l * n_expert_ + e);
        if (s.counter) {
          if (f.counters.empty()) f.counters.assign(n, nullptr);
          f.counters[i] = s.counter;
        } else if (s.gauge) {
          if (f.gauges.empty()) f.gauges.assign(n, nullptr);
          f.gauges[i] = s.gauge;
        } else {
          return;  // a histogram: none of the cells' families is one
        }
        f.m.present[i] = 1;
      },
      [](const std::string& name) { return holds(name); });
}

void ExpertCells::read(const MetricRegistry& registry, int64_t n_layer, int64_t n_expert) {
  if (n_layer <= 0 || n_expert <= 0) n_layer = n_expert = 0;
  if (n_layer != n_layer_ || n_expert != n_expert_ || registry.series_count() != indexed_series_) {
    n_layer_ = n_layer;
    n_expert_ = n_expert;
    index(registry);
  }
  for (Family& f : families_) {
    double* v = f.m.value.data();
    for (size_t i = 0; i < f.counters.size(); ++i) v[i] = f.counters[i] ? f.counters[i]->value() : 0.0;
    for (size_t i = 0; i < f.gauges.size(); ++i) v[i] = f.gauges[i] ? f.gauges[i]->value() : 0.0;
  }
}

const ExpertCells::Matrix* ExpertCells::find(std::string_view name, std::string_view extra) const {
  for (const Family& f : families_)
    if (f.name == name && f.extra == extra) return &f.m;
  return nullptr;
}

void ExpertCells::write(std::string& out, const Matrix* cells, const std::vector<double>* values) const {
  if (!values && cells) values = &cells->value;
  char buf[32];
  auto number = [&](double v) {
    if (!std::isfinite(v)) v = 0.0;
    // Counts are whole: as integers they are shorter, and quicker to write.
    const auto r = v == std::floor(v) && std::fabs(v) < 9.0e15 ? std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v))
                                                               : std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  };
  out += '[';
  for (int64_t l = 0; l < n_layer_; ++l) {
    if (l > 0) out += ',';
    const size_t row = static_cast<size_t>(l * n_expert_);
    if (!cells || !cells->present[row]) {
      out += "null";
      continue;
    }
    out += '[';
    for (int64_t e = 0; e < n_expert_; ++e) {
      const size_t i = row + static_cast<size_t>(e);
      if (e > 0) out += ',';
      number(cells->present[i] ? (*values)[i] : 0.0);
    }
    out += ']';
  }
  out += ']';
}

}  // namespace sluice::server
