#include "transport/rdma/queue_pair.h"

#include <cerrno>
#include <cstring>
#include <random>

namespace chorus::transport::rdma {
namespace {

// Local ACK timeout 4.096 us * 2^16 = 268 ms, 7 retries: a vanished peer surfaces as
// IBV_WC_RETRY_EXC_ERR within about 2 s; slow emulated links stay within one retry.
constexpr uint8_t kAckTimeout = 16;
constexpr uint8_t kRetryCount = 7;
// Credits keep receive queues from running dry, so an RNR NAK is a bug: retry a few
// times, then fail loudly rather than retrying forever (7 would mean "forever").
constexpr uint8_t kRnrRetry = 6;

}  // namespace

Result<std::unique_ptr<QueuePair>> QueuePair::Create(const Device& dev, ibv_cq* cq, const QpCaps& caps,
                                                     const std::string& peer_desc) {
  std::unique_ptr<QueuePair> q(new QueuePair(dev, peer_desc));
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = caps.send_wr;
  init.cap.max_recv_wr = caps.recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  q->qp_ = dev.verbs().create_qp(dev.pd(), &init);
  if (q->qp_ == nullptr) return IoError("ibv_create_qp for " + peer_desc + " on " + dev.name(), errno);
  q->psn_ = std::random_device()() & 0xffffff;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = dev.port();
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  CHORUS_RETURN_IF_ERROR(q->Modify(&a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT"));
  return q;
}

QueuePair::~QueuePair() {
  if (qp_) dev_.verbs().destroy_qp(qp_);
}

QpAddress QueuePair::local() const {
  QpAddress a;
  a.gid = dev_.gid();
  a.lid = dev_.lid();
  a.mtu = static_cast<uint8_t>(dev_.mtu());
  a.qpn = qp_->qp_num;
  a.psn = psn_;
  return a;
}

Status QueuePair::Modify(ibv_qp_attr* attr, int mask, const char* state) {
  const int rc = dev_.verbs().modify_qp(qp_, attr, mask);
  if (rc == 0) return Status::Ok();
  // ibv_modify_qp returns the errno value (and sets errno on most providers).
  return IoError("queue pair to " + peer_desc_ + ": transition to " + state + " on " + dev_.name() + " failed",
                 rc > 0 ? rc : errno);
}

Status QueuePair::Connect(const QpAddress& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(remote.mtu, dev_.mtu()));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.port_num = dev_.port();
  if (dev_.is_roce() || remote.lid == 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote.gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_.gid_index());
    a.ah_attr.grh.hop_limit = 64;
  }
  CHORUS_RETURN_IF_ERROR(Modify(&a,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                                "RTR"));
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = kAckTimeout;
  s.retry_cnt = kRetryCount;
  s.rnr_retry = kRnrRetry;
  s.sq_psn = psn_;
  s.max_rd_atomic = 1;
  return Modify(
      &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
      "RTS");
}

void QueuePair::ToError() {
  if (in_error_ || qp_ == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  in_error_ = dev_.verbs().modify_qp(qp_, &a, IBV_QP_STATE) == 0;
}

}  // namespace chorus::transport::rdma
