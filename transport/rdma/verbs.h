// libibverbs, loaded at run time: dlopen("libibverbs.so.1") once, every symbol chorus
// uses resolved once. chorus therefore builds and runs where rdma-core is absent; the
// RDMA transport then reports "libibverbs not found" and the API falls back to TCP.
//
// Only the functions exported by libibverbs are here. The data-path calls that
// verbs.h defines inline (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq) go through the device context's function table and need no
// symbol, so they are used as they are.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "common/status.h"

namespace chorus::transport::rdma {

struct Verbs {
  ibv_device** (*get_device_list)(int* num_devices);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* device);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*query_device)(ibv_context* context, ibv_device_attr* attr);
  int (*query_port)(ibv_context* context, uint8_t port, ibv_port_attr* attr);  // the compat symbol
  int (*query_gid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_comp_channel* (*create_comp_channel)(ibv_context* context);
  int (*destroy_comp_channel)(ibv_comp_channel* channel);
  ibv_cq* (*create_cq)(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int vector);
  int (*destroy_cq)(ibv_cq* cq);
  int (*get_cq_event)(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
  void (*ack_cq_events)(ibv_cq* cq, unsigned int nevents);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(ibv_qp* qp);
  const char* (*wc_status_str)(ibv_wc_status status);

  // Port attributes, cleared first (what verbs.h's inline wrapper does).
  int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) const;
};

// The process's libibverbs, loaded on first use; an error (kUnavailable) naming what is
// missing when the library or a symbol cannot be found. Thread-safe; the library stays
// loaded for the life of the process.
Result<const Verbs*> LoadVerbs();

}  // namespace chorus::transport::rdma
