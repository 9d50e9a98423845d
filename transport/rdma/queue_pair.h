// A reliable-connected queue pair (RAII) and its state machine RESET → INIT → RTR →
// RTS; each failed transition is an error naming the peer, the state and errno.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "transport/rdma/device.h"

namespace chorus::transport::rdma {

// What a peer needs to connect its QP to ours (exchanged through the bootstrap).
struct QpAddress {
  ibv_gid gid{};
  uint16_t lid = 0;
  uint8_t mtu = IBV_MTU_1024;  // ibv_mtu
  uint32_t qpn = 0;
  uint32_t psn = 0;
};

struct QpCaps {
  uint32_t send_wr = 128;
  uint32_t recv_wr = 64;
};

class QueuePair {
 public:
  // A QP in INIT; send and receive completions go to `cq`.
  static Result<std::unique_ptr<QueuePair>> Create(const Device& dev, ibv_cq* cq, const QpCaps& caps,
                                                   const std::string& peer_desc);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // Our side of the connection, to publish.
  QpAddress local() const;
  // INIT → RTR → RTS, aimed at the peer's QP.
  Status Connect(const QpAddress& remote);
  // Moves the QP to ERROR: posted work requests complete with IBV_WC_WR_FLUSH_ERR and
  // the peer's further writes are refused. Idempotent.
  void ToError();
  ibv_qp* qp() const { return qp_; }

 private:
  QueuePair(const Device& dev, std::string peer_desc) : dev_(dev), peer_desc_(std::move(peer_desc)) {}
  Status Modify(ibv_qp_attr* attr, int mask, const char* state);

  const Device& dev_;
  const std::string peer_desc_;
  ibv_qp* qp_ = nullptr;
  uint32_t psn_ = 0;
  bool in_error_ = false;
};

}  // namespace chorus::transport::rdma
