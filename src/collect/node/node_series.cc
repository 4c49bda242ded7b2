#include "collect/node/node_series.h"

#include <system_error>

#include <fmt/format.h>

namespace ithbat::collect {

NodeCollectorBase::Entity* NodeCollectorBase::NewEntity(std::string_view key, const LabelPairs& labels) {
  if (entities_.size() >= max_entities_) {
    if (!limit_reported_) {
      limit_reported_ = true;
      ReportError(Error{ErrorCode::kResourceExhausted,
                        fmt::format("more than {} label sets; the rest are not collected", max_entities_)});
    }
    return nullptr;
  }
  Result<LabelSet> set = LabelSet::From(labels);
  if (!set) {
    ReportError(Error{set.error().code, fmt::format("labels for '{}': {}", key, set.error().message)});
    // Remember the refusal so that it is reported once, not every tick.
    Entity refused;
    refused.refs.assign(descs_.size(), -2);
    return &entities_.emplace(std::string(key), std::move(refused)).first->second;
  }
  Entity e;
  e.labels = std::move(*set);
  e.refs.assign(descs_.size(), -1);
  return &entities_.emplace(std::string(key), std::move(e)).first->second;
}

void NodeCollectorBase::Emit(Entity* entity, size_t desc, TimeNs t, double value) {
  if (entity == nullptr) return;
  int64_t& ref = entity->refs[desc];
  if (ref == -2) return;
  if (ref == -1) {
    Result<SeriesRef> r = sink_->RegisterSeries(descs_[desc], entity->labels);
    if (!r) {
      ref = -2;
      ReportError(Error{r.error().code,
                        fmt::format("register {}{}: {} (series skipped from now on)", descs_[desc].name,
                                    entity->labels.ToString(), r.error().message)});
      return;
    }
    ref = *r;
  }
  if (Status s = sink_->Append(static_cast<SeriesRef>(ref), t, value); !s) {
    if (append_failures_++ == 0) first_append_error_ = s.error();
  }
}

void NodeCollectorBase::BeginTick() {
  append_failures_ = 0;
  first_append_error_.reset();
}

void NodeCollectorBase::EndTick() {
  if (append_failures_ == 0) return;
  ReportError(Error{first_append_error_->code, fmt::format("{} appends failed this tick; first: {}",
                                                           append_failures_, first_append_error_->message)});
}

Status NodeCollectorBase::CheckRoot(const std::filesystem::path& root, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    return MakeErrorF(ErrorCode::kNotFound, "{} root '{}' is not a directory{}", what, root.string(),
                      ec ? ": " + ec.message() : std::string());
  }
  return Ok();
}

}  // namespace ithbat::collect
