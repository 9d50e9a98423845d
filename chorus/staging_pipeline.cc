#include "chorus/staging_pipeline.h"

#include <algorithm>
#include <string>

namespace chorus::internal {

Status StagingPipeline::BeginInput(void* host, const void* device, size_t bytes, bool start_now) {
  in_host_ = static_cast<char*>(host);
  in_device_ = static_cast<const char*>(device);
  in_bytes_ = bytes;
  if (start_now) StartInput({});
  return error_;
}

void StagingPipeline::InputOrder(const std::vector<std::pair<size_t, size_t>>& ranges) {
  if (!in_started_) StartInput(ranges);
}

std::vector<size_t> SegmentsInOrder(const std::vector<std::pair<size_t, size_t>>& ranges, size_t bytes,
                                    size_t segment) {
  const size_t segments = (bytes + segment - 1) / segment;
  std::vector<size_t> order;
  order.reserve(segments);
  std::vector<bool> taken(segments, false);
  auto take = [&](size_t seg) {
    if (taken[seg]) return;
    taken[seg] = true;
    order.push_back(seg);
  };
  for (auto [offset, n] : ranges) {
    if (n == 0 || offset >= bytes) continue;
    const size_t last = (std::min(offset + n, bytes) - 1) / segment;
    for (size_t seg = offset / segment; seg <= last; ++seg) take(seg);
  }
  for (size_t seg = 0; seg < segments; ++seg) take(seg);
  return order;
}

void StagingPipeline::StartInput(const std::vector<std::pair<size_t, size_t>>& ranges) {
  in_started_ = true;
  in_tickets_.assign(Segments(in_bytes_), 0);
  for (size_t seg : SegmentsInOrder(ranges, in_bytes_, segment_)) {
    if (!error_.ok()) return;
    const size_t off = seg * segment_;
    Result<uint64_t> t = in_.Start(in_host_ + off, in_device_ + off, std::min(segment_, in_bytes_ - off));
    if (!t.ok()) return Fail(t.status().WithContext("staging the input to the host"));
    in_tickets_[seg] = t.value();
    in_last_ = t.value();
    in_any_ = true;
  }
}

void StagingPipeline::SetOutput(void* device, const void* host, size_t bytes) {
  out_device_ = static_cast<char*>(device);
  out_host_ = static_cast<const char*>(host);
  out_bytes_ = bytes;
  final_.assign(Segments(bytes), {});
  started_.assign(Segments(bytes), false);
}

Status StagingPipeline::WaitInput(size_t offset, size_t bytes) {
  if (!in_started_) StartInput({{offset, bytes}});
  if (!error_.ok()) return error_;
  if (bytes == 0 || offset >= in_bytes_) return Status::Ok();
  // The engine completes in order: the range is on the host once its latest copy is.
  uint64_t need = 0;
  const size_t last = (std::min(offset + bytes, in_bytes_) - 1) / segment_;
  for (size_t seg = offset / segment_; seg <= last; ++seg) need = std::max(need, in_tickets_[seg]);
  if (need < in_waited_) return Status::Ok();
  Status st = in_.Wait(need, deadline_);
  if (!st.ok()) {
    Fail(st.WithContext("staging the input to the host"));
    return error_;
  }
  in_waited_ = need + 1;
  return Status::Ok();
}

void StagingPipeline::OutputFinal(size_t offset, size_t bytes) {
  const size_t end = std::min(offset + bytes, out_bytes_);
  for (size_t a = offset; a < end;) {
    const size_t seg = a / segment_;
    const size_t seg_begin = seg * segment_, seg_end = std::min(seg_begin + segment_, out_bytes_);
    const size_t b = std::min(end, seg_end);
    // Insert [a, b) and merge it with the ranges it touches.
    std::vector<std::pair<size_t, size_t>>& r = final_[seg];
    auto it = std::lower_bound(r.begin(), r.end(), std::make_pair(a, a));
    if (it != r.begin() && std::prev(it)->second >= a) --it;
    size_t lo = a, hi = b;
    auto first = it;
    for (; it != r.end() && it->first <= hi; ++it) {
      lo = std::min(lo, it->first);
      hi = std::max(hi, it->second);
    }
    it = r.erase(first, it);
    r.insert(it, {lo, hi});
    if (r.size() == 1 && r[0].first == seg_begin && r[0].second == seg_end) StartOutput(seg);
    a = b;
  }
}

void StagingPipeline::StartOutput(size_t seg) {
  if (started_[seg] || !error_.ok()) return;
  started_[seg] = true;
  const size_t off = seg * segment_;
  Result<uint64_t> t = out_.Start(out_device_ + off, out_host_ + off, std::min(segment_, out_bytes_ - off));
  if (!t.ok()) return Fail(t.status().WithContext("copying the results back to the device"));
  out_last_ = t.value();
  out_any_ = true;
}

Status StagingPipeline::Finish(bool ok) {
  if (ok) {
    for (size_t seg = 0; seg < started_.size(); ++seg) StartOutput(seg);
  }
  // Wait even after a failure: a copy in flight still reads or writes the bounce buffers.
  Status st = error_;
  if (in_any_) {
    Status w = in_.Wait(in_last_, deadline_);
    if (st.ok() && !w.ok()) st = w.WithContext("staging the input to the host");
  }
  if (out_any_) {
    Status w = out_.Wait(out_last_, deadline_);
    if (st.ok() && !w.ok()) st = w.WithContext("copying the results back to the device");
  }
  return st;
}

}  // namespace chorus::internal
