#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/verbs/verbs_device.hpp"

namespace memwire::detail::verbs {

// Memory regions for the active side's local buffers, shared by every transfer that uses a
// covered range at the same time (one buffer read into or written from by many operations
// is registered once). A region lives while some transfer holds it and is deregistered when
// the last one lets go: an idle region would keep pinning pages the owner may since have
// freed and remapped at the same address, and a later transfer would silently move its
// bytes to the old pages.
class LocalMrCache {
 public:
  explicit LocalMrCache(std::shared_ptr<const VerbsDevice> device) : device_(std::move(device)) {}

  // A region covering [address, address + length) with at least `access`. Throws
  // Error{Transport} when the memory cannot be registered.
  std::shared_ptr<const ibv_mr> acquire(void* address, std::size_t length, int access);

  // Regions currently registered (for tests and stats).
  std::size_t size();

 private:
  struct Entry {
    std::uintptr_t begin;
    std::uintptr_t end;
    int access;
    std::weak_ptr<const ibv_mr> region;
  };

  std::shared_ptr<const VerbsDevice> device_;
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace memwire::detail::verbs
