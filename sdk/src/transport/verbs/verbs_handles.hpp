#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace memwire::detail::verbs {

// Owners for the native verbs and rdma_cm handles: one deleter each, nothing else. The
// destroy calls can only fail on misuse (e.g. a PD still in use); there is nothing to do about
// that at destruction time, so their results are ignored.
struct DeviceListDeleter {
  void operator()(ibv_context** list) const noexcept { rdma_free_devices(list); }
};
struct PdDeleter {
  void operator()(ibv_pd* pd) const noexcept { ibv_dealloc_pd(pd); }
};
struct CompChannelDeleter {
  void operator()(ibv_comp_channel* channel) const noexcept { ibv_destroy_comp_channel(channel); }
};
struct CqDeleter {
  void operator()(ibv_cq* cq) const noexcept { ibv_destroy_cq(cq); }
};
struct MrDeleter {
  void operator()(ibv_mr* mr) const noexcept { ibv_dereg_mr(mr); }
};
struct MwDeleter {
  void operator()(ibv_mw* mw) const noexcept { ibv_dealloc_mw(mw); }
};
struct EventChannelDeleter {
  void operator()(rdma_event_channel* channel) const noexcept {
    rdma_destroy_event_channel(channel);
  }
};
// An id owns its QP (if any): the QP goes first, then the id.
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const noexcept {
    if (id->qp != nullptr) rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
};

// The contexts librdmacm opened: cm ids resolve to these, so QPs and PDs must use them too.
using DeviceList = std::unique_ptr<ibv_context*, DeviceListDeleter>;
using Pd = std::unique_ptr<ibv_pd, PdDeleter>;
using CompChannel = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using Cq = std::unique_ptr<ibv_cq, CqDeleter>;
using Mr = std::unique_ptr<ibv_mr, MrDeleter>;
using Mw = std::unique_ptr<ibv_mw, MwDeleter>;
using EventChannel = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

}  // namespace memwire::detail::verbs
