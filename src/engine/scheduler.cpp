#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace sluice {

Status validate_scheduler_config(const SchedulerConfig& config, const BlockManagerConfig& blocks) {
  if (config.max_batch_tokens < 1) {
    return invalid_argument("scheduler: max_batch_tokens must be at least 1, got {}", config.max_batch_tokens);
  }
  if (config.max_seqs < 1) return invalid_argument("scheduler: max_seqs must be at least 1, got {}", config.max_seqs);
  if (config.long_prefill_token_threshold < 0) {
    return invalid_argument("scheduler: long_prefill_token_threshold must not be negative, got {}",
                            config.long_prefill_token_threshold);
  }
  if (config.watermark_blocks < 0) {
    return invalid_argument("scheduler: watermark_blocks must not be negative, got {}", config.watermark_blocks);
  }
  if (blocks.n_blocks < 1 || blocks.block_size < 1 || blocks.n_host_blocks < 0) {
    return invalid_argument("scheduler: {} blocks of {} tokens and {} host slots is not a KV pool", blocks.n_blocks,
                            blocks.block_size, blocks.n_host_blocks);
  }
  return Status::ok_status();
}

Scheduler::Scheduler(const SchedulerConfig& config, const BlockManagerConfig& blocks)
    : config_(config), blocks_(blocks) {
  CHECK(validate_scheduler_config(config, blocks).ok());
}

int64_t Scheduler::longest_chunk() const {
  return config_.long_prefill_token_threshold > 0
             ? std::min(config_.max_batch_tokens, config_.long_prefill_token_threshold)
             : config_.max_batch_tokens;
}

Sequence& Scheduler::seq(SeqId id) {
  auto it = seqs_.find(id);
  CHECK(it != seqs_.end());
  return it->second;
}

const Sequence* Scheduler::find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void Scheduler::insert_sorted(std::vector<SeqId>* queue, SeqId id) {
  auto pos = std::upper_bound(queue->begin(), queue->end(), id,
                              [&](SeqId a, SeqId b) { return schedules_before(seq(a), seq(b)); });
  queue->insert(pos, id);
}

void Scheduler::erase_from(std::vector<SeqId>* queue, SeqId id) {
  auto it = std::find(queue->begin(), queue->end(), id);
  CHECK(it != queue->end());
  queue->erase(it);
}

Status Scheduler::add(SeqId id, SequenceParams params) {
  RETURN_IF_ERROR(validate_sequence_params(params));
  if (seqs_.count(id)) return invalid_argument("scheduler: sequence id {} is in use", id);
  // The most slots a sequence reserves is prompt + max_tokens - 1 (its last token
  // is sampled, never computed); it must fit the whole pool, or it could never run.
  // With a sliding window, slots are reserved a chunk at a time and released
  // behind the window, so a sequence holds at most the window's blocks and a
  // chunk's (longest_chunk()), however long it gets.
  const int64_t n_total_blocks = admission_blocks_ > 0 ? admission_blocks_ : blocks_.pool().n_total();
  const int64_t n_capacity = n_total_blocks * blocks_.block_size();
  const int64_t n_prompt = static_cast<int64_t>(params.prompt.size());
  if (blocks_.window() > 0) {
    const int64_t need = blocks_.window_blocks() + blocks_.blocks_for(longest_chunk());
    if (need > n_total_blocks) {
      return resource_exhausted(
          "scheduler: sequence {} with a sliding window of {} and chunks of up to {} tokens needs {} blocks, the pool "
          "has {}",
          id, blocks_.window(), longest_chunk(), need, n_total_blocks);
    }
  } else if (n_prompt > n_capacity || params.stop.max_tokens - 1 > n_capacity - n_prompt) {
    return resource_exhausted("scheduler: sequence {} needs up to {} + {} - 1 token slots, the pool has {}", id,
                              n_prompt, params.stop.max_tokens, n_capacity);
  }
  seqs_.emplace(id, Sequence::from_params(id, std::move(params), next_arrival_++));
  insert_sorted(&waiting_, id);
  return Status::ok_status();
}

int64_t Scheduler::chunk_size(const Sequence& s, int64_t budget) const {
  int64_t n = std::min(s.n_uncomputed(), budget);
  if (config_.long_prefill_token_threshold > 0) n = std::min(n, config_.long_prefill_token_threshold);
  return n;
}

int64_t Scheduler::reserve_end(const Sequence& s, int64_t budget) const {
  if (blocks_.window() == 0) return s.n_total();
  return std::max(blocks_.n_tokens(s.id), s.n_computed + chunk_size(s, budget));
}

void Scheduler::reserve_slots(Sequence& s, int64_t end, StepPlan* plan) {
  const int64_t n_reserved = blocks_.n_tokens(s.id);
  CHECK(n_reserved <= end && end <= s.n_total());
  if (n_reserved == end) return;
  StatusOr<std::vector<BlockCopy>> copies = blocks_.append(
      s.id, std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(n_reserved),
                                                       static_cast<size_t>(end - n_reserved)));
  CHECK(copies.ok());  // the caller checked can_append
  plan->copies.insert(plan->copies.end(), copies->begin(), copies->end());
}

void Scheduler::fit_draft(Sequence& s, int64_t budget) {
  if (s.n_draft == 0) return;
  if (config_.long_prefill_token_threshold > 0) budget = std::min(budget, config_.long_prefill_token_threshold);
  if (s.n_uncomputed() <= budget) return;
  const int64_t keep = std::max<int64_t>(0, budget - 1);
  s.tokens.resize(static_cast<size_t>(s.n_committed() + keep));
  s.n_draft = keep;
}

void Scheduler::schedule_chunk(const Sequence& s, int64_t* budget, StepPlan* plan) {
  CHECK(s.n_uncomputed() > 0 && *budget > 0);
  const int64_t n = chunk_size(s, *budget);
  CHECK(s.n_draft == 0 || n == s.n_uncomputed());  // fit_draft ran
  CHECK(s.n_computed + n <= blocks_.n_tokens(s.id));  // reserve_slots ran
  const std::span<const int32_t> chunk =
      std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.n_computed), static_cast<size_t>(n));
  const std::span<const int32_t> table = blocks_.block_table(s.id);
  const bool sample = s.n_computed + n == s.n_total();
  plan->seqs.push_back(ScheduledSeq{
      .id = s.id,
      .tokens = std::vector<int32_t>(chunk.begin(), chunk.end()),
      .pos0 = s.n_computed,
      .block_table = std::vector<int32_t>(table.begin(), table.end()),
      .sample = sample,
      .n_draft = s.n_draft,
      .loras = s.loras,
  });
  plan->n_batch_tokens += n;
  in_flight_.push_back({.id = s.id, .n_tokens = n, .sample = sample, .n_draft = s.n_draft});
  *budget -= n;
}

void Scheduler::preempt(SeqId id, StepPlan* plan) {
  Sequence& s = seq(id);
  ++s.n_preemptions;
  plan->preempted.push_back(id);
  // Drafts were never reserved for a sequence preempted before its chunk.
  CHECK(blocks_.n_tokens(id) <= s.n_committed());
  s.drop_draft();
  if (config_.preemption_mode == PreemptionMode::kSwap && blocks_.can_swap_out(id)) {
    StatusOr<std::vector<BlockSwap>> moves = blocks_.swap_out(id);
    CHECK(moves.ok());
    plan->swap_out.insert(plan->swap_out.end(), moves->begin(), moves->end());
    s.state = SeqState::kSwapped;
    insert_sorted(&swapped_, id);
    ++stats_.n_preempted_swap;
    return;
  }
  CHECK(blocks_.free(id).ok());
  s.n_computed = 0;
  s.state = SeqState::kWaiting;
  insert_sorted(&waiting_, id);
  ++stats_.n_preempted_recompute;
}

BlockDemand Scheduler::block_demand() const {
  BlockDemand d;
  int64_t budget = config_.max_batch_tokens;
  for (SeqId id : running_) {
    if (budget <= 0) break;
    const Sequence& s = seqs_.at(id);
    const int64_t end = reserve_end(s, budget);
    d.running_need += blocks_.blocks_needed_to_append(s.id, end - blocks_.n_tokens(s.id));
    budget -= chunk_size(s, budget);
  }
  if (!swapped_.empty()) {
    const Sequence& s = seqs_.at(swapped_.front());
    d.waiting_need = blocks_.blocks_for(reserve_end(s, config_.max_batch_tokens));
  } else if (!waiting_.empty()) {
    const Sequence& s = seqs_.at(waiting_.front());
    const int64_t n = blocks_.window() > 0 ? std::min(s.n_total(), longest_chunk()) : s.n_total();
    d.waiting_need = blocks_.blocks_for(n) + (running_.empty() ? 0 : config_.watermark_blocks);
  }
  for (const auto& [id, s] : seqs_) {
    const int64_t most = blocks_.window() > 0 ? blocks_.window_blocks() + blocks_.blocks_for(longest_chunk())
                                              : blocks_.blocks_for(s.n_prompt + s.stop.max_tokens - 1);
    d.largest_seq = std::max(d.largest_seq, most);
  }
  return d;
}

StepPlan Scheduler::schedule() {
  CHECK(in_flight_.empty());
  StepPlan plan;
  int64_t budget = config_.max_batch_tokens;

  // 1. Running sequences, in queue order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& s = seq(running_[i]);
    fit_draft(s, budget);
    // Drafts are a bet: they never cost another sequence its blocks. Each
    // sequence after this one may need one fresh block for its own tokens.
    if (s.n_draft > 0) {
      const int64_t n_later = static_cast<int64_t>(running_.size() - 1 - i);
      const int64_t need = blocks_.blocks_needed_to_append(s.id, s.n_total() - blocks_.n_tokens(s.id));
      if (need > blocks_.pool().n_available() - n_later) s.drop_draft();
    }
    const int64_t end = reserve_end(s, budget);
    const int64_t n_new = end - blocks_.n_tokens(s.id);
    bool self_preempted = false;
    while (!blocks_.can_append(s.id, n_new)) {
      if (running_.size() - 1 > i) {
        const SeqId victim = running_.back();
        running_.pop_back();
        preempt(victim, &plan);
      } else {
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        preempt(s.id, &plan);
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last one
    reserve_slots(s, end, &plan);
    schedule_chunk(s, &budget, &plan);
    ++i;
  }
  const bool preempted_any = !plan.preempted.empty();

  // 2. Swapped sequences come back while they fit.
  while (!preempted_any && !swapped_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_seqs) {
    Sequence& s = seq(swapped_.front());
    const int64_t end = reserve_end(s, budget);
    if (!blocks_.can_swap_in(s.id, end - blocks_.n_tokens(s.id))) break;
    StatusOr<std::vector<BlockSwap>> moves = blocks_.swap_in(s.id);
    CHECK(moves.ok());
    plan.swap_in.insert(plan.swap_in.end(), moves->begin(), moves->end());
    swapped_.erase(swapped_.begin());
    s.state = SeqState::kRunning;
    insert_sorted(&running_, s.id);
    ++stats_.n_swapped_in;
    reserve_slots(s, end, &plan);
    schedule_chunk(s, &budget, &plan);
  }

  // 3. Waiting sequences are admitted while they fit, strictly in order.
  while (!preempted_any && swapped_.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_seqs) {
    Sequence& s = seq(waiting_.front());
    const int64_t reserve = running_.empty() ? 0 : config_.watermark_blocks;
    // With a window, slots only through the first chunk (after any cached prefix).
    std::span<const int32_t> tokens(s.tokens);
    if (blocks_.window() > 0) {
      const int64_t n_cached = blocks_.match_prefix(tokens, s.loras);
      const int64_t n_chunk = std::min(s.n_total() - n_cached, budget);
      tokens = tokens.first(static_cast<size_t>(
          n_cached + (config_.long_prefill_token_threshold > 0 ? std::min(n_chunk, config_.long_prefill_token_threshold)
                                                               : n_chunk)));
    }
    // K/V computed under the sequence's adapters: blocks keyed by them.
    if (!blocks_.can_allocate(tokens, reserve, s.loras)) break;
    StatusOr<int64_t> n_cached = blocks_.allocate(s.id, tokens, s.loras);
    CHECK(n_cached.ok());
    s.n_computed = *n_cached;
    waiting_.erase(waiting_.begin());
    s.state = SeqState::kRunning;
    insert_sorted(&running_, s.id);
    schedule_chunk(s, &budget, &plan);
  }

  if (!plan.seqs.empty()) ++stats_.n_steps;
  stats_.n_scheduled_tokens += plan.n_batch_tokens;
  return plan;
}

Status Scheduler::update(const StepOutput& output) {
  if (in_flight_.empty()) {
    if (output.seqs.empty()) return Status::ok_status();
    return invalid_argument("scheduler update: {} outputs but no step in flight", output.seqs.size());
  }
  auto is_aborted = [&](SeqId id) {
    return std::find(pending_aborts_.begin(), pending_aborts_.end(), id) != pending_aborts_.end();
  };
  // Validate everything before changing anything.
  std::vector<const SeqOutput*> out_of(in_flight_.size(), nullptr);
  for (const SeqOutput& o : output.seqs) {
    auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const InFlight& f) { return f.id == o.id; });
    if (it == in_flight_.end() || !it->sample) {
      return invalid_argument("scheduler update: sequence {} was not scheduled to sample", o.id);
    }
    const size_t k = static_cast<size_t>(it - in_flight_.begin());
    if (out_of[k]) return invalid_argument("scheduler update: two outputs for sequence {}", o.id);
    if (o.tokens.empty()) return invalid_argument("scheduler update: no token for sequence {}", o.id);
    out_of[k] = &o;
  }
  for (size_t k = 0; k < in_flight_.size(); ++k) {
    if (in_flight_[k].sample && !out_of[k] && !is_aborted(in_flight_[k].id)) {
      return invalid_argument("scheduler update: no output for sequence {}", in_flight_[k].id);
    }
  }
  for (size_t k = 0; k < in_flight_.size(); ++k) {
    const InFlight& f = in_flight_[k];
    const SeqOutput* o = out_of[k];
    if (f.n_draft > 0 && o && !is_aborted(f.id)) {
      const std::span<const int32_t> draft = seq(f.id).draft();
      const size_t m = o->tokens.size() - 1;
      if (m > draft.size() || !std::equal(o->tokens.begin(), o->tokens.begin() + static_cast<std::ptrdiff_t>(m),
                                          draft.begin())) {
        return invalid_argument("scheduler update: sequence {} output is not accepted drafts then one token", f.id);
      }
    } else if (o && o->tokens.size() != 1 && !is_aborted(f.id)) {
      return invalid_argument("scheduler update: sequence {} had no drafts but got {} tokens", f.id,
                              o->tokens.size());
    }
  }
  for (size_t k = 0; k < in_flight_.size(); ++k) {
    const InFlight& f = in_flight_[k];
    Sequence& s = seq(f.id);
    s.n_computed += f.n_tokens;
    if (is_aborted(f.id)) {
      finish(f.id, FinishReason::kAbort);
      continue;
    }
    FinishReason reason = FinishReason::kNone;
    if (f.n_draft > 0) {
      // Keep the K/V rows of the accepted drafts only.
      const int64_t n_rejected = f.n_draft - static_cast<int64_t>(out_of[k]->tokens.size() - 1);
      s.n_computed -= n_rejected;
      s.drop_draft();
      CHECK(blocks_.truncate(f.id, s.n_computed).ok());
    }
    if (f.sample) reason = s.append_generated(out_of[k]->tokens);
    s.n_computed = std::min(s.n_computed, s.n_total());  // a stop token among the accepted ones
    CHECK(blocks_.mark_computed(f.id, s.n_computed).ok());
    if (reason != FinishReason::kNone) finish(f.id, reason);
  }
  in_flight_.clear();
  pending_aborts_.clear();
  return Status::ok_status();
}

void Scheduler::finish(SeqId id, FinishReason reason) {
  Sequence& s = seq(id);
  switch (s.state) {
    case SeqState::kWaiting: erase_from(&waiting_, id); break;
    case SeqState::kRunning: erase_from(&running_, id); break;
    case SeqState::kSwapped: erase_from(&swapped_, id); break;
    case SeqState::kFinished: CHECK(false); break;
  }
  if (blocks_.has_seq(id)) CHECK(blocks_.free(id).ok());
  s.state = SeqState::kFinished;
  s.finish_reason = reason;
  ++stats_.n_finished;
  if (reason == FinishReason::kAbort) ++stats_.n_aborted;
  finished_.push_back(std::move(s));
  seqs_.erase(id);
}

Status Scheduler::abort(SeqId id) {
  if (!seqs_.count(id)) return not_found("scheduler abort: no unfinished sequence {}", id);
  const bool in_step =
      std::any_of(in_flight_.begin(), in_flight_.end(), [&](const InFlight& f) { return f.id == id; });
  if (in_step) {
    // Its rows may be being written right now; release them at update.
    if (std::find(pending_aborts_.begin(), pending_aborts_.end(), id) == pending_aborts_.end()) {
      pending_aborts_.push_back(id);
    }
    return Status::ok_status();
  }
  finish(id, FinishReason::kAbort);
  return Status::ok_status();
}

Status Scheduler::fork(SeqId parent, SeqId child, std::optional<int32_t> child_last_token) {
  if (!in_flight_.empty()) return invalid_argument("scheduler fork: only between steps");
  auto it = seqs_.find(parent);
  if (it == seqs_.end()) return not_found("scheduler fork: no unfinished sequence {}", parent);
  if (seqs_.count(child)) return invalid_argument("scheduler fork: sequence id {} is in use", child);
  const Sequence& p = it->second;
  if (p.state == SeqState::kSwapped) return invalid_argument("scheduler fork: sequence {} is swapped out", parent);
  if (p.state == SeqState::kRunning) {
    if (blocks_.n_tokens(parent) != p.n_computed || p.n_committed() - p.n_computed > 1) {
      return invalid_argument("scheduler fork: sequence {} is still in prefill", parent);
    }
    if (static_cast<int64_t>(running_.size()) >= config_.max_seqs) {
      return resource_exhausted("scheduler fork: {} sequences already run", running_.size());
    }
  }
  if (p.n_draft > 0) return invalid_argument("scheduler fork: sequence {} has drafts pending", parent);
  if (child_last_token && p.n_generated() == 0) {
    return invalid_argument("scheduler fork: sequence {} has no generated token to replace", parent);
  }
  Sequence c = p;
  c.id = child;
  if (child_last_token) c.tokens.back() = *child_last_token;
  c.arrival = next_arrival_++;
  c.n_preemptions = 0;
  if (c.state == SeqState::kRunning) RETURN_IF_ERROR(blocks_.fork(parent, child));
  const SeqState state = c.state;
  seqs_.emplace(child, std::move(c));
  insert_sorted(state == SeqState::kRunning ? &running_ : &waiting_, child);
  return Status::ok_status();
}

StatusOr<int64_t> Scheduler::set_draft(SeqId id, std::span<const int32_t> draft) {
  if (!in_flight_.empty()) return invalid_argument("scheduler set_draft: only between steps");
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.state != SeqState::kRunning) {
    return not_found("scheduler set_draft: no running sequence {}", id);
  }
  Sequence& s = it->second;
  if (s.n_committed() - s.n_computed != 1) {
    return invalid_argument("scheduler set_draft: sequence {} is not decoding ({} of {} tokens computed)", id,
                            s.n_computed, s.n_committed());
  }
  s.drop_draft();
  const int64_t room = std::max<int64_t>(0, s.stop.max_tokens - s.n_generated() - 1);
  const int64_t keep = std::min(room, static_cast<int64_t>(draft.size()));
  s.tokens.insert(s.tokens.end(), draft.begin(), draft.begin() + keep);
  s.n_draft = keep;
  return keep;
}

std::vector<Sequence> Scheduler::take_finished() {
  std::vector<Sequence> out = std::move(finished_);
  finished_.clear();
  return out;
}

Status Scheduler::check_invariants() const {
  RETURN_IF_ERROR(blocks_.check_invariants());
  const std::pair<const std::vector<SeqId>*, SeqState> queues[] = {
      {&waiting_, SeqState::kWaiting}, {&running_, SeqState::kRunning}, {&swapped_, SeqState::kSwapped}};
  size_t n_queued = 0;
  for (const auto& [queue, state] : queues) {
    n_queued += queue->size();
    for (size_t i = 0; i < queue->size(); ++i) {
      const SeqId id = (*queue)[i];
      auto it = seqs_.find(id);
      if (it == seqs_.end()) return internal_error("scheduler: queued sequence {} is unknown", id);
      const Sequence& s = it->second;
      if (s.state != state) {
        return internal_error("scheduler: sequence {} is {} in the {} queue", id, seq_state_name(s.state),
                              seq_state_name(state));
      }
      if (i > 0 && !schedules_before(seqs_.at((*queue)[i - 1]), s)) {
        return internal_error("scheduler: {} queue out of order at sequence {}", seq_state_name(state), id);
      }
      const int64_t n_reserved = blocks_.n_tokens(id);
      const bool resident = state != SeqState::kWaiting;
      if (blocks_.has_seq(id) != resident || blocks_.is_swapped(id) != (state == SeqState::kSwapped)) {
        return internal_error("scheduler: {} sequence {} has the wrong kind of blocks", seq_state_name(state), id);
      }
      if (resident) {
        const std::span<const int32_t> reserved = blocks_.tokens(id);
        if (n_reserved > s.n_total() || !std::equal(reserved.begin(), reserved.end(), s.tokens.begin())) {
          return internal_error("scheduler: sequence {} reserved tokens are not a prefix of its tokens", id);
        }
      }
      const int64_t n_computed_max = state == SeqState::kWaiting ? 0 : n_reserved;
      if (s.n_computed < 0 || s.n_computed > n_computed_max || (in_flight_.empty() && s.n_uncomputed() < 1)) {
        return internal_error("scheduler: sequence {} has {} computed of {} reserved, {} total", id, s.n_computed,
                              n_reserved, s.n_total());
      }
      if (s.n_draft < 0 || (s.n_draft > 0 && (state != SeqState::kRunning || s.n_committed() - s.n_computed != 1))) {
        return internal_error("scheduler: {} sequence {} has {} drafts with {} of {} committed computed",
                              seq_state_name(state), id, s.n_draft, s.n_computed, s.n_committed());
      }
      if (s.n_generated() + s.n_draft >= s.stop.max_tokens || s.n_prompt < 1) {
        return internal_error("scheduler: sequence {} has {} generated of {} allowed", id, s.n_generated(),
                              s.stop.max_tokens);
      }
    }
  }
  if (n_queued != seqs_.size()) {
    return internal_error("scheduler: {} sequences queued, {} unfinished", n_queued, seqs_.size());
  }
  if (static_cast<int64_t>(running_.size()) > config_.max_seqs) {
    return internal_error("scheduler: {} running over max_seqs {}", running_.size(), config_.max_seqs);
  }
  if (blocks_.n_seqs() != n_running() + n_swapped()) {
    return internal_error("scheduler: block manager has {} sequences, {} running + swapped", blocks_.n_seqs(),
                          n_running() + n_swapped());
  }
  return Status::ok_status();
}

}  // namespace sluice
