#include "transport/verbs/descriptor_runs.hpp"

namespace memwire::detail::verbs {

DescriptorRuns runs_of(const std::vector<Descriptor>& descriptors) {
  DescriptorRuns result;
  result.run_of.reserve(descriptors.size());
  result.offset_in_run.reserve(descriptors.size());
  const std::byte* run_end = nullptr;
  for (const auto& descriptor : descriptors) {
    auto* begin = static_cast<std::byte*>(descriptor.ptr());
    if (descriptor.size() == 0) {
      result.run_of.push_back(DescriptorRuns::kNone);
      result.offset_in_run.push_back(0);
      continue;
    }
    if (result.runs.empty() || begin != run_end) {
      result.runs.emplace_back(begin, 0, descriptor.device());
    }
    auto& run = result.runs.back();
    result.run_of.push_back(result.runs.size() - 1);
    result.offset_in_run.push_back(run.size());
    run = Descriptor(run.ptr(), run.size() + descriptor.size(), run.device());
    run_end = begin + descriptor.size();
  }
  return result;
}

}  // namespace memwire::detail::verbs
