// Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from real encoded
// frames and records. Rerun when a format changes:
//   clang++-14 -std=c++17 -I. tests/fuzz/make_seeds.cc rendezvous/store_protocol.cc \
//     rendezvous/bootstrap.cc rendezvous/bootstrap_ring_wire.cc rendezvous/net_util.cc \
//     rendezvous/socket_io.cc transport/tcp/wire.cc common/*.cc -lpthread -o /tmp/make_seeds && \
//     /tmp/make_seeds tests/fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "rendezvous/bootstrap.h"
#include "rendezvous/bootstrap_ring_wire.h"
#include "rendezvous/store_protocol.h"
#include "transport/tcp/wire.h"

namespace {

namespace rv = chorus::rendezvous;
namespace tcp = chorus::transport::tcp;
namespace ring = chorus::rendezvous::ring_wire;

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

std::string Bytes(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

void StoreSeeds(const std::string& dir) {
  rv::StoreRequest set{rv::StoreOp::kSet, {"chorus/comm0/peers/1"}, "value", "", 0};
  Write(dir, "set", rv::EncodeRequest(set));
  Write(dir, "get", rv::EncodeRequest({rv::StoreOp::kGet, {"k"}, "", "", 30000}));
  Write(dir, "multi_get", rv::EncodeRequest({rv::StoreOp::kMultiGet, {"a", "b", "c"}, "", "", 1000}));
  Write(dir, "compare_set", rv::EncodeRequest({rv::StoreOp::kCompareSet, {"k"}, "new", "old", 0}));
  Write(dir, "add_ping",
        rv::EncodeRequest({rv::StoreOp::kAdd, {"n"}, "", "", -3}) +
            rv::EncodeRequest({rv::StoreOp::kPing, {}, "", "", 0}));
  rv::StoreReply values{rv::ReplyCode::kOk, "", {"x", "yz"}, 0};
  Write(dir, "reply_multi_get", rv::EncodeReply(rv::StoreOp::kMultiGet, values));
  Write(dir, "reply_error", rv::EncodeErrorReply(3, "store: bad request"));
  rv::AuthChallenge challenge{true, {}};
  challenge.server_nonce[0] = 7;
  rv::AuthProof proof{true, {}, {}};
  proof.mac[31] = 1;
  Write(dir, "auth",
        rv::EncodeAuthChallenge(challenge) + rv::EncodeAuthProof(proof) + rv::EncodeAuthAccepted(proof.mac));
}

void PeerSeeds(const std::string& dir) {
  rv::PeerInfo p;
  p.rank = 3;
  p.hostname = "node-1";
  p.host_id = "node-1 boot=ab%cd";
  p.pid = 4242;
  p.tcp_address = "10.0.0.1:5000";
  Write(dir, "minimal", p.Serialize());
  p.rdma_address = "qp=1 lid=2";
  p.interfaces = {"eth0=10.0.0.1", "ib0=192.168.1.1"};
  p.cuda_ipc_off = true;
  p.cores = 64;
  p.machine = "0b1c-boot";
  p.tcp_lanes = 4;
  p.pid_ns = "pid:[4026531836]";
  p.shm = rv::PeerInfo::Shm::kNeed;
  Write(dir, "full", p.Serialize());
}

void WireSeeds(const std::string& wire, const std::string& frames) {
  tcp::Hello h{77, 1, 0, 4, 1, 2, true, {}};
  uint8_t hello[tcp::kHelloSize];
  tcp::EncodeHello(h, hello);
  Write(wire, "hello", std::string(1, '\0') + Bytes(hello, sizeof hello));
  tcp::Reply r;
  r.accept = false;
  r.comm_id = 77;
  r.world_size = 4;
  r.nsockets = 2;
  r.reason = "world size differs";
  uint8_t reply[tcp::kReplySize];
  tcp::EncodeReply(r, reply);
  Write(wire, "reply", std::string(1, '\1') + Bytes(reply, sizeof reply));
  std::string stream = "\x10\x05";  // tcp_frames: staging and piece size bytes
  auto frame = [&](const tcp::FrameHeader& f, const std::string& payload) {
    uint8_t header[tcp::kFrameHeaderSize];
    tcp::EncodeFrameHeader(f, header);
    stream += Bytes(header, sizeof header) + payload;
    return Bytes(header, sizeof header);
  };
  Write(wire, "data_header", "\2" + frame({tcp::FrameType::kData, 5, 0, 10, 0, 10, 99}, "0123456789"));
  frame({tcp::FrameType::kData, 5, 1, 8, 4, 4, 98}, "abcd");
  frame({tcp::FrameType::kReady, 6, 0, 0, 0, 0, 0}, "");
  frame({tcp::FrameType::kRts, 6, 1, 1 << 20, 0, 0, 0}, "");
  frame({tcp::FrameType::kPing, 0, 0, 0, 0, 0, 0}, "");
  Write(wire, "abort_header", "\2" + frame({tcp::FrameType::kAbort, 0, 0, 6, 0, 6, 0}, "bye..."));
  Write(frames, "stream", stream);
}

// bootstrap_ring: the first byte picks the decoder (0 hello, 1 reply, 2 frames).
void RingSeeds(const std::string& dir) {
  ring::Hello h{77, 2, 3, 4, true, {}};
  h.nonce[0] = 9;
  Write(dir, "hello", std::string(1, '\0') + ring::Encode(h));
  ring::Reply r;
  r.accept = true;
  r.acceptor = 3;
  r.size = 4;
  r.secret = true;
  r.nonce[15] = 1;
  r.mac[0] = 2;
  Write(dir, "reply_accept", "\1" + ring::Encode(r));
  r = ring::Reply();
  r.acceptor = 3;
  r.size = 4;
  r.reason = "rank 3 refused: world size 5, here 4";
  Write(dir, "reply_refuse", "\1" + ring::Encode(r));
  r.failed = true;
  r.reason = ring::FailedReason(chorus::StatusCode::kTimeout, "rank 5 of 8 never arrived within 30 s");
  Write(dir, "reply_failed", "\1" + ring::Encode(r));
  Write(dir, "frames",
        "\2" + ring::Frame(ring::kDataFrame, 1, 2, "record of rank 2") + ring::Frame(ring::kDataFrame, 1, 1, "") +
            ring::Frame(ring::kFailureFrame, static_cast<uint32_t>(chorus::StatusCode::kPeerFailed), 1,
                        "rank 1 failed: closed"));
  Write(dir, "failure_frame",
        "\2" + ring::Frame(ring::kFailureFrame, static_cast<uint32_t>(chorus::StatusCode::kTimeout), 0, "timed out"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (with store_frame/ peer_info/ tcp_wire/ tcp_frames/ bootstrap_ring/)\n",
                 argv[0]);
    return 2;
  }
  std::string root = argv[1];
  StoreSeeds(root + "/store_frame");
  PeerSeeds(root + "/peer_info");
  WireSeeds(root + "/tcp_wire", root + "/tcp_frames");
  RingSeeds(root + "/bootstrap_ring");
  return 0;
}
