#include "transport/rdma/verbs.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace chorus::transport::rdma {
namespace {

constexpr const char* kLibrary = "libibverbs.so.1";

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *fn != nullptr;
}

Result<const Verbs*> Load() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Unavailable(std::string("RDMA unavailable: cannot load ") + kLibrary + " (" + (why ? why : "?") +
                       "); install rdma-core/libibverbs1");
  }
  static Verbs v;
  std::string missing;
  Resolve(lib, "ibv_get_device_list", &v.get_device_list, &missing);
  Resolve(lib, "ibv_free_device_list", &v.free_device_list, &missing);
  Resolve(lib, "ibv_get_device_name", &v.get_device_name, &missing);
  Resolve(lib, "ibv_open_device", &v.open_device, &missing);
  Resolve(lib, "ibv_close_device", &v.close_device, &missing);
  Resolve(lib, "ibv_query_device", &v.query_device, &missing);
  Resolve(lib, "ibv_query_port", &v.query_port, &missing);
  Resolve(lib, "ibv_query_gid", &v.query_gid, &missing);
  Resolve(lib, "ibv_alloc_pd", &v.alloc_pd, &missing);
  Resolve(lib, "ibv_dealloc_pd", &v.dealloc_pd, &missing);
  Resolve(lib, "ibv_reg_mr", &v.reg_mr, &missing);
  Resolve(lib, "ibv_dereg_mr", &v.dereg_mr, &missing);
  Resolve(lib, "ibv_create_comp_channel", &v.create_comp_channel, &missing);
  Resolve(lib, "ibv_destroy_comp_channel", &v.destroy_comp_channel, &missing);
  Resolve(lib, "ibv_create_cq", &v.create_cq, &missing);
  Resolve(lib, "ibv_destroy_cq", &v.destroy_cq, &missing);
  Resolve(lib, "ibv_get_cq_event", &v.get_cq_event, &missing);
  Resolve(lib, "ibv_ack_cq_events", &v.ack_cq_events, &missing);
  Resolve(lib, "ibv_create_qp", &v.create_qp, &missing);
  Resolve(lib, "ibv_modify_qp", &v.modify_qp, &missing);
  Resolve(lib, "ibv_destroy_qp", &v.destroy_qp, &missing);
  Resolve(lib, "ibv_wc_status_str", &v.wc_status_str, &missing);
  if (!missing.empty()) {
    dlclose(lib);
    return Unavailable(std::string("RDMA unavailable: ") + kLibrary + " lacks " + missing);
  }
  return &v;
}

}  // namespace

int Verbs::QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) const {
  std::memset(attr, 0, sizeof(*attr));
  return query_port(context, port, attr);
}

Result<const Verbs*> LoadVerbs() {
  static std::once_flag once;
  static Result<const Verbs*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<const Verbs*>(Load()); });
  return *loaded;
}

}  // namespace chorus::transport::rdma
