// The TCP wire format and the per-socket state machines, fed by hand: no sockets.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "transport/tag.h"
#include "transport/tcp/frame_machine.h"
#include "transport/tcp/wire.h"

namespace chorus::transport::tcp {
namespace {

TEST(Wire, HelloRoundTripsAndRejectsForeignBytes) {
  Hello h{0x1122334455667788ull, 3, 1, 4, 1, 2};
  uint8_t buf[kHelloSize];
  EncodeHello(h, buf);
  Result<Hello> d = DecodeHello(buf);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->comm_id, h.comm_id);
  EXPECT_EQ(d->sender, 3);
  EXPECT_EQ(d->receiver, 1);
  EXPECT_EQ(d->world_size, 4);
  EXPECT_EQ(d->socket_index, 1);
  EXPECT_EQ(d->nsockets, 2);
  EXPECT_FALSE(d->has_secret);
  // The job secret's flag and nonce.
  h.has_secret = true;
  for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(i + 1);
  EncodeHello(h, buf);
  d = DecodeHello(buf);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->has_secret);
  EXPECT_EQ(d->nonce, h.nonce);
  // An HTTP client, say, knocking on our port.
  std::memcpy(buf, "GET / HTTP/1.1\r\n", 16);  // NOLINT(bugprone-not-null-terminated-result): bytes, not a string
  Result<Hello> bad = DecodeHello(buf);
  EXPECT_EQ(bad.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(bad.status().message().find("magic"), std::string::npos);
  // Right magic, another protocol version.
  EncodeHello(h, buf);
  buf[4] = 99;
  bad = DecodeHello(buf);
  EXPECT_EQ(bad.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(bad.status().message().find("version 99"), std::string::npos) << bad.status().message();
}

TEST(Wire, ReplyCarriesTheVerdictAndReasonLength) {
  Reply r;
  r.accept = false;
  r.comm_id = 7;
  r.acceptor = 0;
  r.connector = 2;
  r.world_size = 3;
  r.nsockets = 2;
  r.reason = "communicator id 0x7 != 0x8";
  uint8_t buf[kReplySize];
  EncodeReply(r, buf);
  uint32_t len = 0;
  Result<Reply> d = DecodeReply(buf, &len);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->accept);
  EXPECT_EQ(d->connector, 2);
  EXPECT_EQ(len, r.reason.size());
}

TEST(Wire, CrossedVerdictAbortedAndLazyFlagsRoundTrip) {
  Reply r;
  r.crossed = true;
  uint8_t buf[kReplySize];
  EncodeReply(r, buf);
  uint32_t len = 0;
  Result<Reply> d = DecodeReply(buf, &len);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->accept);
  EXPECT_TRUE(d->crossed);
  EXPECT_FALSE(d->aborted);
  Reply refused;
  refused.aborted = true;
  refused.reason = "rank 0 aborted: because";
  EncodeReply(refused, buf);
  d = DecodeReply(buf, &len);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->accept || d->crossed);
  EXPECT_TRUE(d->aborted);
  Hello h;
  h.lazy = true;
  uint8_t hb[kHelloSize];
  EncodeHello(h, hb);
  Result<Hello> dh = DecodeHello(hb);
  ASSERT_TRUE(dh.ok());
  EXPECT_TRUE(dh->lazy);
  EXPECT_FALSE(dh->has_secret);
}

TEST(Wire, FrameHeaderRoundTripsAndDetectsCorruption) {
  FrameHeader h;
  h.tag = CollectiveTag(1, 2);
  h.tag_seq = 5;
  h.total_len = 1000;
  h.offset = 500;
  h.len = 500;
  h.fingerprint = 0xfeedface;
  uint8_t buf[kFrameHeaderSize];
  EncodeFrameHeader(h, buf);
  Result<FrameHeader> d = DecodeFrameHeader(buf);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tag, h.tag);
  EXPECT_EQ(d->tag_seq, 5u);
  EXPECT_EQ(d->offset, 500u);
  EXPECT_EQ(d->fingerprint, h.fingerprint);
  // Any flipped bit in the fields is caught by the check word or the range checks.
  for (size_t byte = 8; byte < kFrameHeaderSize - 8; ++byte) {
    uint8_t c[kFrameHeaderSize];
    std::memcpy(c, buf, sizeof(c));
    c[byte] ^= 0x04;
    EXPECT_FALSE(DecodeFrameHeader(c).ok()) << "flip in byte " << byte;
  }
  // A stripe that runs past the message.
  h.offset = 600;
  EncodeFrameHeader(h, buf);
  EXPECT_EQ(DecodeFrameHeader(buf).status().code(), StatusCode::kProtocolError);
  // A size no sender may claim.
  h.offset = 0;
  h.len = 0;
  h.total_len = kMaxMessageBytes + 1;
  EncodeFrameHeader(h, buf);
  EXPECT_FALSE(DecodeFrameHeader(buf).ok());
}

// Collects what the receive machine hands over; payloads land in per-frame buffers.
class Sink : public FrameSink {
 public:
  Status OnDataHeader(const FrameHeader& h, RecvDest* dest) override {
    auto& b = bufs[{h.tag, h.tag_seq}];
    b.resize(h.total_len);
    dest->ptr = h.len ? b.data() + h.offset : nullptr;
    return Status::Ok();
  }
  Status OnDataDone(const FrameHeader& h, void*) override {
    done.push_back(h);
    return Status::Ok();
  }
  Status OnAbortFrame(const std::string& reason) override {
    aborts.push_back(reason);
    return Status::Ok();
  }
  Status OnControlFrame(const FrameHeader& h) override {
    controls.push_back(h);
    return Status::Ok();
  }
  std::map<std::pair<uint64_t, uint64_t>, std::vector<char>> bufs;
  std::vector<FrameHeader> controls;
  std::vector<FrameHeader> done;
  std::vector<std::string> aborts;
};

// Serialises frames with the send machine, delivering `step` bytes per "syscall".
std::string Wire(SendMachine* tx) {
  std::string out;
  std::vector<BasicRequestPtr> sent;
  for (int guard = 0; !tx->empty() && guard < 100000; ++guard) {
    struct iovec iov[SendMachine::kMaxIov];
    int n = tx->Prepare(iov, SendMachine::kMaxIov);
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
      total += iov[i].iov_len;
    }
    tx->OnSent(total, &sent);
  }
  return out;
}

void Feed(RecvMachine* rx, const std::string& bytes, size_t step) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    RecvMachine::Target t = rx->Next();
    size_t n = std::min({t.len, step, bytes.size() - pos});
    std::memcpy(t.ptr, bytes.data() + pos, n);
    ASSERT_TRUE(rx->OnReceived(n).ok());
    pos += n;
  }
}

TEST(FrameMachines, ManyFramesSurviveAnyChunkingOfTheStream) {
  std::vector<std::string> payloads = {"", "x", std::string(100000, 'a'), "hello", std::string(70000, 'z')};
  for (size_t step : {size_t{1}, size_t{7}, size_t{4096}, size_t{1} << 20}) {
    SendMachine tx;
    for (size_t i = 0; i < payloads.size(); ++i) {
      FrameHeader h;
      h.tag = i % 2;
      h.tag_seq = i;
      h.total_len = h.len = payloads[i].size();
      tx.Push(h, payloads[i].data(), nullptr);
    }
    FrameHeader rts, ready;  // rendezvous control frames between the data frames
    rts.type = FrameType::kRts;
    rts.tag = 9;
    rts.tag_seq = 3;
    rts.total_len = 1 << 20;
    tx.Push(rts, nullptr, nullptr);
    ready.type = FrameType::kReady;
    ready.tag = 8;
    ready.tag_seq = 4;
    tx.Push(ready, nullptr, nullptr);
    FrameHeader ab;
    ab.type = FrameType::kAbort;
    ab.len = ab.total_len = 4;
    tx.PushOwned(ab, "bye!");
    std::string bytes = Wire(&tx);
    Sink sink;
    RecvMachine rx(&sink, 4096);
    Feed(&rx, bytes, step);
    ASSERT_EQ(sink.done.size(), payloads.size()) << "step " << step;
    for (size_t i = 0; i < payloads.size(); ++i) {
      const auto& b = sink.bufs[{i % 2, i}];
      EXPECT_EQ(std::string(b.begin(), b.end()), payloads[i]) << "frame " << i << " step " << step;
    }
    ASSERT_EQ(sink.controls.size(), 2u);
    EXPECT_EQ(sink.controls[0].type, FrameType::kRts);
    EXPECT_EQ(sink.controls[0].tag, 9u);
    EXPECT_EQ(sink.controls[0].tag_seq, 3u);
    EXPECT_EQ(sink.controls[0].total_len, uint64_t{1} << 20);
    EXPECT_EQ(sink.controls[1].type, FrameType::kReady);
    EXPECT_EQ(sink.controls[1].tag_seq, 4u);
    ASSERT_EQ(sink.aborts.size(), 1u);
    EXPECT_EQ(sink.aborts[0], "bye!");
    EXPECT_FALSE(rx.mid_frame());
  }
}

TEST(Wire, ControlFramesCarryNoPayload) {
  for (FrameType t : {FrameType::kReady, FrameType::kRts, FrameType::kPause, FrameType::kResume, FrameType::kPing,
                      FrameType::kPong}) {
    FrameHeader h;
    h.type = t;
    h.total_len = 100;
    uint8_t buf[kFrameHeaderSize];
    EncodeFrameHeader(h, buf);
    EXPECT_TRUE(DecodeFrameHeader(buf).ok());
    h.len = 10;
    EncodeFrameHeader(h, buf);
    Result<FrameHeader> bad = DecodeFrameHeader(buf);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("READY/RTS"), std::string::npos) << bad.status().ToString();
  }
  // The type after the last one is unknown (a newer peer's frame is an error, not data).
  uint8_t buf[kFrameHeaderSize];
  FrameHeader h;
  h.type = static_cast<FrameType>(static_cast<uint32_t>(FrameType::kPong) + 1);
  EncodeFrameHeader(h, buf);
  Result<FrameHeader> unknown = DecodeFrameHeader(buf);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown frame type"), std::string::npos) << unknown.status().ToString();
}

// TakeUnstarted (a PAUSE takes queued messages back): the chosen frames leave the
// queue, the rest go out in their order, an owned payload (ABORT text) intact.
TEST(FrameMachines, TakenFramesLeaveTheRestInOrder) {
  SendMachine tx;
  const std::string a(5000, 'a'), b(300, 'b'), c(7000, 'c');
  auto push = [&](uint64_t tag, uint64_t seq, const std::string& p) {
    FrameHeader h;
    h.tag = tag;
    h.tag_seq = seq;
    h.total_len = h.len = p.size();
    tx.Push(h, p.data(), nullptr);
  };
  push(1, 0, a);
  FrameHeader ab;
  ab.type = FrameType::kAbort;
  ab.len = ab.total_len = 5;
  tx.PushOwned(ab, "short");
  push(2, 0, b);
  push(1, 1, c);
  std::vector<OutFrame> taken = tx.TakeUnstarted([](const OutFrame& f) { return f.h.tag == 1; });
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].h.tag_seq, 0u);
  EXPECT_EQ(taken[1].h.tag_seq, 1u);
  EXPECT_EQ(taken[1].h.total_len, c.size());
  const std::string bytes = Wire(&tx);
  Sink sink;
  RecvMachine rx(&sink, 4096);
  Feed(&rx, bytes, 100);
  ASSERT_EQ(sink.aborts.size(), 1u);
  EXPECT_EQ(sink.aborts[0], "short");
  ASSERT_EQ(sink.done.size(), 1u);
  EXPECT_EQ(sink.done[0].tag, 2u);
  const auto& got = sink.bufs[{2, 0}];
  EXPECT_EQ(std::string(got.begin(), got.end()), b);
}

// After a large frame the machine asks for a header alone, so the next large payload
// goes straight to its destination (not through staging, where it would be copied).
TEST(FrameMachines, AfterALargeFrameOnlyAHeaderIsStaged) {
  const std::string big(100000, 'q');
  SendMachine tx;
  for (uint64_t i = 0; i < 3; ++i) {
    FrameHeader h;
    h.tag_seq = i;
    h.total_len = h.len = i < 2 ? big.size() : 5;
    tx.Push(h, i < 2 ? big.data() : "small", nullptr);
  }
  const std::string bytes = Wire(&tx);
  Sink sink;
  RecvMachine rx(&sink);
  // The kernel hands over at most one frame per receive here (the first one whole).
  const size_t frame0 = kFrameHeaderSize + big.size();
  size_t pos = 0, staged = 0, header_only = 0;
  while (pos < bytes.size()) {
    const bool between_frames = !rx.mid_frame();
    RecvMachine::Target t = rx.Next();
    const size_t n = std::min({t.len, bytes.size() - pos, frame0});
    std::memcpy(t.ptr, bytes.data() + pos, n);
    if (!t.direct) staged += n;
    if (pos > 0 && between_frames) {
      EXPECT_EQ(t.len, kFrameHeaderSize) << "at byte " << pos;
      ++header_only;
    }
    ASSERT_TRUE(rx.OnReceived(n).ok());
    pos += n;
  }
  ASSERT_EQ(sink.done.size(), 3u);
  EXPECT_EQ(header_only, 2u);  // before frames 1 and 2
  // Everything but frame 1's payload came through staging (frame 0: nothing known yet).
  EXPECT_EQ(staged, bytes.size() - big.size());
  EXPECT_EQ(std::string(sink.bufs[{0, 1}].begin(), sink.bufs[{0, 1}].end()), big);
  EXPECT_EQ(std::string(sink.bufs[{0, 2}].begin(), sink.bufs[{0, 2}].end()), "small");
}

TEST(FrameMachines, GarbageInTheStreamIsAnErrorNotACrash) {
  Sink sink;
  RecvMachine rx(&sink, 4096);
  std::string junk(kFrameHeaderSize, '\x5a');
  RecvMachine::Target t = rx.Next();
  std::memcpy(t.ptr, junk.data(), junk.size());
  Status st = rx.OnReceived(junk.size());
  EXPECT_EQ(st.code(), StatusCode::kProtocolError);
}

TEST(FrameMachines, PartialSendsResumeMidFrame) {
  std::string payload(10000, 'q');
  SendMachine tx;
  FrameHeader h;
  h.total_len = h.len = payload.size();
  tx.Push(h, payload.data(), nullptr);
  std::vector<BasicRequestPtr> sent;
  std::string out;
  while (!tx.empty()) {
    struct iovec iov[SendMachine::kMaxIov];
    int n = tx.Prepare(iov, SendMachine::kMaxIov);
    ASSERT_GT(n, 0);
    size_t take = std::min<size_t>(iov[0].iov_len, 333);  // the kernel took only part of it
    out.append(static_cast<const char*>(iov[0].iov_base), take);
    tx.OnSent(take, &sent);
    EXPECT_FALSE(tx.at_boundary() && !tx.empty() && out.size() % (kFrameHeaderSize + payload.size()) != 0);
  }
  EXPECT_EQ(out.size(), kFrameHeaderSize + payload.size());
  EXPECT_EQ(out.substr(kFrameHeaderSize), payload);
}

}  // namespace
}  // namespace chorus::transport::tcp
