// A cpu backend event: a position in one stream.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_stream.hpp"

namespace soma::detail::backend::cpu {

class cpu_event final : public event {
 public:
  status record(stream& s) override;
  status query() override;
  status synchronize() override;

  struct snapshot {
    std::shared_ptr<stream_state> source;  ///< null until recorded
    std::uint64_t position = 0;
  };
  /// The stream and position of the latest record, read together.
  snapshot recorded() const;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<stream_state> source_;  // null until recorded
  std::uint64_t position_ = 0;
};

}  // namespace soma::detail::backend::cpu
