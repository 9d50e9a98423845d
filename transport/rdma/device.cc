#include "transport/rdma/device.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace chorus::transport::rdma {
namespace {

bool IsZero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b != 0) return false;
  return true;
}

bool IsIpv4Mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g.raw[i] != 0) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// "RoCE v2", "IB/RoCE v1" or "" (sysfs is the portable way to read a GID's type).
std::string GidType(const std::string& dev, int port, int index) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                  std::to_string(index));
  std::string line;
  std::getline(f, line);
  return line;
}

const char* MtuName(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return "256";
    case IBV_MTU_512: return "512";
    case IBV_MTU_1024: return "1024";
    case IBV_MTU_2048: return "2048";
    case IBV_MTU_4096: return "4096";
  }
  return "?";
}

}  // namespace

std::string GidToString(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (IsIpv4Mapped(gid)) {
    inet_ntop(AF_INET, gid.raw + 12, text, sizeof(text));
    return std::string("::ffff:") + text;
  }
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

Result<std::unique_ptr<Device>> Device::Open(const Verbs* verbs, const DeviceOptions& opts) {
  std::string want_dev = opts.hca, want_port;
  if (size_t colon = want_dev.find(':'); colon != std::string::npos) {
    want_port = want_dev.substr(colon + 1);
    want_dev.resize(colon);
  }
  int n = 0;
  errno = 0;
  ibv_device** list = verbs->get_device_list(&n);
  if (list == nullptr || n == 0) {
    const int err = errno;
    if (list) verbs->free_device_list(list);
    return Unavailable(std::string("no verbs device (ibv_get_device_list: ") +
                       (err ? std::strerror(err) : "empty list") + ")");
  }
  std::unique_ptr<Device> d(new Device());
  d->verbs_ = verbs;
  std::string tried;
  Status last = Unavailable("no verbs device with an active port");
  for (int i = 0; i < n && d->context_ == nullptr; ++i) {
    const std::string name = verbs->get_device_name(list[i]);
    if (!want_dev.empty() && name != want_dev) continue;
    tried += (tried.empty() ? "" : ", ") + name;
    d->context_ = verbs->open_device(list[i]);
    if (d->context_ == nullptr) {
      last = IoError("ibv_open_device(" + name + ")", errno);
      continue;
    }
    d->name_ = name;
    last = d->PickPort(want_port);
    if (!last.ok()) {
      verbs->close_device(d->context_);
      d->context_ = nullptr;
    }
  }
  verbs->free_device_list(list);
  if (d->context_ == nullptr) {
    if (!want_dev.empty() && tried.empty())
      return Unavailable("CHORUS_IB_HCA=" + opts.hca + ": no verbs device named '" + want_dev + "'");
    return Status(last.code(), "no usable verbs device (tried " + tried + "): " + last.message());
  }
  d->pd_ = verbs->alloc_pd(d->context_);
  if (d->pd_ == nullptr) return IoError("ibv_alloc_pd(" + d->name_ + ")", errno);
  CHORUS_RETURN_IF_ERROR(d->PickGid(opts));
  return d;
}

Status Device::PickPort(const std::string& want_port) {
  ibv_device_attr attr{};
  if (verbs_->query_device(context_, &attr) != 0) return IoError("ibv_query_device(" + name_ + ")", errno);
  int first = 1, last = attr.phys_port_cnt;
  if (!want_port.empty()) {
    char* end = nullptr;
    long p = std::strtol(want_port.c_str(), &end, 10);
    if (*end != 0 || p < 1 || p > attr.phys_port_cnt) {
      return InvalidArgument("CHORUS_IB_HCA: port '" + want_port + "' of " + name_ + " does not exist (it has " +
                             std::to_string(attr.phys_port_cnt) + ")");
    }
    first = last = static_cast<int>(p);
  }
  for (int p = first; p <= last; ++p) {
    ibv_port_attr pa;
    if (verbs_->QueryPort(context_, static_cast<uint8_t>(p), &pa) != 0) continue;
    if (pa.state != IBV_PORT_ACTIVE) continue;
    port_ = static_cast<uint8_t>(p);
    lid_ = pa.lid;
    mtu_ = pa.active_mtu;
    roce_ = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (pa.max_msg_sz > 0) max_msg_ = pa.max_msg_sz;
    return Status::Ok();
  }
  return Unavailable(name_ + " has no active port" + (want_port.empty() ? "" : " " + want_port));
}

Status Device::PickGid(const DeviceOptions& opts) {
  ibv_port_attr pa;
  if (verbs_->QueryPort(context_, port_, &pa) != 0) return IoError("ibv_query_port(" + name_ + ")", errno);
  const int table = pa.gid_tbl_len;
  if (opts.gid_index >= 0) {
    if (opts.gid_index >= table) {
      return InvalidArgument("CHORUS_IB_GID_INDEX=" + std::to_string(opts.gid_index) + " is outside " + name_ +
                             "'s GID table (" + std::to_string(table) + " entries)");
    }
    if (verbs_->query_gid(context_, port_, opts.gid_index, &gid_) != 0 || IsZero(gid_)) {
      return InvalidArgument("CHORUS_IB_GID_INDEX=" + std::to_string(opts.gid_index) + ": entry of " + name_ +
                             " is empty");
    }
    gid_index_ = opts.gid_index;
    return Status::Ok();
  }
  if (!roce_) {  // InfiniBand: routed by LID; GID 0 for the record
    gid_index_ = 0;
    verbs_->query_gid(context_, port_, 0, &gid_);
    return Status::Ok();
  }
  // RoCE: the v2 entry of the interface we reach peers on, else the first IPv4 v2 one,
  // else the first v2 one, else the first non-empty one.
  in_addr want{};
  const bool have_ip = !opts.local_ip.empty() && inet_pton(AF_INET, opts.local_ip.c_str(), &want) == 1;
  int best = -1, best_score = -1;
  for (int i = 0; i < table; ++i) {
    ibv_gid g;
    if (verbs_->query_gid(context_, port_, i, &g) != 0 || IsZero(g)) continue;
    const bool v2 = GidType(name_, port_, i) == "RoCE v2";
    const bool v4 = IsIpv4Mapped(g);
    const bool mine = have_ip && v4 && std::memcmp(g.raw + 12, &want, 4) == 0;
    const int score = (mine && v2) ? 4 : (v2 && v4) ? 3 : v2 ? 2 : 1;
    if (score > best_score) {
      best = i;
      best_score = score;
      gid_ = g;
    }
  }
  if (best < 0) return Unavailable(name_ + " port " + std::to_string(port_) + " has no GID (is its netdev up?)");
  gid_index_ = best;
  return Status::Ok();
}

Device::~Device() {
  if (pd_) verbs_->dealloc_pd(pd_);
  if (context_) verbs_->close_device(context_);
}

std::string Device::Describe() const {
  return name_ + ":" + std::to_string(port_) + (roce_ ? " RoCE gid[" : " IB lid " + std::to_string(lid_) + " gid[") +
         std::to_string(gid_index_) + "] " + GidToString(gid_) + " mtu " + MtuName(mtu_);
}

}  // namespace chorus::transport::rdma
