// One opened verbs device: its context, protection domain, chosen port and GID.
// Selection is automatic (the first device with an active port; on RoCE the RoCE v2
// GID of the interface that reaches the peers, else the first IPv4 RoCE v2 GID) or set
// with CHORUS_IB_HCA=dev[:port] and CHORUS_IB_GID_INDEX.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "transport/rdma/verbs.h"

namespace chorus::transport::rdma {

struct DeviceOptions {
  std::string hca;       // "" (auto), "rxe0" or "rxe0:1"
  int gid_index = -1;    // -1: automatic
  std::string local_ip;  // the address this rank uses to reach its peers (GID choice)
};

class Device {
 public:
  // kUnavailable "no verbs device" (with the reason) when nothing usable is found.
  static Result<std::unique_ptr<Device>> Open(const Verbs* verbs, const DeviceOptions& opts);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Verbs& verbs() const { return *verbs_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  uint8_t port() const { return port_; }
  int gid_index() const { return gid_index_; }
  const ibv_gid& gid() const { return gid_; }
  uint16_t lid() const { return lid_; }
  ibv_mtu mtu() const { return mtu_; }
  bool is_roce() const { return roce_; }
  uint64_t max_message_bytes() const { return max_msg_; }
  const std::string& name() const { return name_; }
  // "rxe0:1 RoCE gid[1] ::ffff:10.77.0.1 mtu 1024"
  std::string Describe() const;

 private:
  Device() = default;
  Status PickPort(const std::string& want_port);
  Status PickGid(const DeviceOptions& opts);

  const Verbs* verbs_ = nullptr;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::string name_;
  uint8_t port_ = 1;
  int gid_index_ = 0;
  ibv_gid gid_{};
  uint16_t lid_ = 0;
  ibv_mtu mtu_ = IBV_MTU_1024;
  bool roce_ = false;
  uint64_t max_msg_ = 1u << 30;
};

// "fe80::1" style text of a GID (IPv4-mapped ones as ::ffff:a.b.c.d).
std::string GidToString(const ibv_gid& gid);

}  // namespace chorus::transport::rdma
