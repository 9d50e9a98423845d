// The bootstrap ring's wire format: round trips, and truncated, oversized and
// wrong-magic inputs rejected.
#include "rendezvous/bootstrap_ring_wire.h"

#include <gtest/gtest.h>

namespace chorus::rendezvous::ring_wire {
namespace {

void Set32(std::string* s, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

Hello SomeHello() {
  Hello h{0x1122334455667788ull, 2, 3, 4, true, {}};
  h.nonce[0] = 1;
  h.nonce[15] = 0xff;
  return h;
}

Reply SomeReply() {
  Reply r;
  r.accept = true;
  r.acceptor = 3;
  r.size = 4;
  r.secret = true;
  r.nonce[7] = 9;
  r.mac[31] = 5;
  return r;
}

TEST(RingWire, HelloRoundTrips) {
  const std::string bytes = Encode(SomeHello());
  ASSERT_EQ(bytes.size(), kHelloSize);
  const std::optional<Hello> h = DecodeHello(bytes);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->comm_id, 0x1122334455667788ull);
  EXPECT_EQ(h->sender, 2);
  EXPECT_EQ(h->receiver, 3);
  EXPECT_EQ(h->size, 4);
  EXPECT_TRUE(h->secret);
  EXPECT_EQ(h->nonce, SomeHello().nonce);
}

TEST(RingWire, HelloOfAnotherSizeMagicOrVersionIsRejected) {
  const std::string bytes = Encode(SomeHello());
  EXPECT_FALSE(DecodeHello(""));
  EXPECT_FALSE(DecodeHello(bytes.substr(0, kHelloSize - 1)));
  EXPECT_FALSE(DecodeHello(bytes + "x"));
  std::string magic = bytes;
  magic[0] ^= 1;
  EXPECT_FALSE(DecodeHello(magic));
  std::string version = bytes;
  version[4] = 2;
  EXPECT_FALSE(DecodeHello(version));
}

TEST(RingWire, RepliesRoundTrip) {
  const std::string accept = Encode(SomeReply());
  ASSERT_EQ(accept.size(), kReplySize);
  Result<size_t> len = ReplyLength(accept);
  ASSERT_TRUE(len.ok()) << len.status().ToString();
  EXPECT_EQ(len.value(), kReplySize);
  Result<Reply> r = DecodeReply(accept);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->accept);
  EXPECT_FALSE(r->failed);
  EXPECT_EQ(r->acceptor, 3);
  EXPECT_EQ(r->size, 4);
  EXPECT_TRUE(r->secret);
  EXPECT_EQ(r->nonce, SomeReply().nonce);
  EXPECT_EQ(r->mac, SomeReply().mac);

  Reply refuse;
  refuse.reason = "world size 5, here 4";
  Result<Reply> back = DecodeReply(Encode(refuse));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->accept);
  EXPECT_FALSE(back->failed);
  EXPECT_EQ(back->reason, "world size 5, here 4");
}

TEST(RingWire, FailedReplyCarriesCodeAndMessage) {
  Reply failed;
  failed.failed = true;
  failed.reason = FailedReason(StatusCode::kTimeout, "rank 5 never arrived");
  Result<Reply> back = DecodeReply(Encode(failed));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->failed);
  const Failure f = ParseFailedReason(back->reason);
  EXPECT_EQ(f.code, StatusCode::kTimeout);
  EXPECT_EQ(f.message, "rank 5 never arrived");
  // No code, an unknown one, or one too long for any integer: a failed peer.
  EXPECT_EQ(ParseFailedReason("no-code-here").code, StatusCode::kPeerFailed);
  EXPECT_EQ(ParseFailedReason("no-code-here").message, "no-code-here");
  EXPECT_EQ(ParseFailedReason("0 x").code, StatusCode::kPeerFailed);
  EXPECT_EQ(ParseFailedReason("99999999999999999999 x").code, StatusCode::kPeerFailed);
  EXPECT_EQ(ParseFailedReason("99999999999999999999 x").message, "x");
}

TEST(RingWire, LongReasonIsCutToTheCap) {
  Reply r;
  r.reason = std::string(kMaxReasonBytes + 100, 'r');
  const std::string bytes = Encode(r);
  EXPECT_EQ(bytes.size(), kReplySize + kMaxReasonBytes);
  Result<Reply> back = DecodeReply(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->reason.size(), kMaxReasonBytes);
}

TEST(RingWire, TruncatedOversizedAndWrongMagicRepliesAreRejected) {
  Reply refuse;
  refuse.reason = "refused";
  const std::string bytes = Encode(refuse);
  // Truncated: short of the fixed part, or of the reason it announces.
  EXPECT_FALSE(ReplyLength(bytes.substr(0, kReplySize - 1)).ok());
  EXPECT_FALSE(DecodeReply(bytes.substr(0, kReplySize - 1)).ok());
  EXPECT_FALSE(DecodeReply(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(DecodeReply(bytes + "x").ok());
  // A reason length over the cap is refused from the fixed part alone, before the
  // connector would wait for (and buffer) that much.
  std::string oversized = bytes.substr(0, kReplySize);
  Set32(&oversized, 20, kMaxReasonBytes + 1);
  Result<size_t> len = ReplyLength(oversized);
  ASSERT_FALSE(len.ok());
  EXPECT_EQ(len.status().code(), StatusCode::kProtocolError);
  Set32(&oversized, 20, 0xffffffffu);
  EXPECT_FALSE(ReplyLength(oversized).ok());
  EXPECT_FALSE(DecodeReply(oversized).ok());

  std::string magic = bytes;
  magic[3] ^= 0x40;
  EXPECT_FALSE(ReplyLength(magic).ok());
  EXPECT_FALSE(DecodeReply(magic).ok());
  std::string version = bytes;
  version[4] = 7;
  EXPECT_FALSE(DecodeReply(version).ok());
  std::string verdict = bytes;
  verdict[6] = 3;
  EXPECT_FALSE(DecodeReply(verdict).ok());
}

TEST(RingWire, FramesArePeekedOnlyWhenComplete) {
  const std::string data = Frame(kDataFrame, 7, 2, "record");
  const std::string failure = Frame(kFailureFrame, static_cast<uint32_t>(StatusCode::kTimeout), 1, "why");
  const std::string buf = data + failure;
  Result<std::optional<FrameHead>> head = PeekFrame(buf, 0);
  ASSERT_TRUE(head.ok() && head.value());
  EXPECT_EQ(head.value()->kind, kDataFrame);
  EXPECT_EQ(head.value()->seq, 7u);
  EXPECT_EQ(head.value()->origin, 2);
  EXPECT_EQ(head.value()->len, 6u);
  head = PeekFrame(buf, data.size());
  ASSERT_TRUE(head.ok() && head.value());
  EXPECT_EQ(head.value()->kind, kFailureFrame);
  EXPECT_EQ(CodeOf(head.value()->seq), StatusCode::kTimeout);
  EXPECT_EQ(buf.substr(data.size() + kFrameHeaderSize, head.value()->len), "why");
  // The end of the buffer, a partial header, a partial payload: not there yet.
  for (const size_t cut : {size_t{0}, size_t{5}, kFrameHeaderSize, data.size() - 1}) {
    head = PeekFrame(data.substr(0, cut), 0);
    ASSERT_TRUE(head.ok()) << cut;
    EXPECT_FALSE(head.value()) << cut;
  }
  head = PeekFrame(buf, buf.size());
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head.value());
}

TEST(RingWire, ImpossibleFrameHeadersAreRejected) {
  // Over the caps: known from the header alone, whatever follows.
  std::string record = Frame(kDataFrame, 1, 0, "");
  Set32(&record, 12, static_cast<uint32_t>(kMaxRecordBytes + 1));
  Result<std::optional<FrameHead>> head = PeekFrame(record, 0);
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), StatusCode::kProtocolError);
  std::string reason = Frame(kFailureFrame, 1, 0, "");
  Set32(&reason, 12, static_cast<uint32_t>(kMaxReasonBytes + 1));
  EXPECT_FALSE(PeekFrame(reason, 0).ok());
  // Not a kind the ring knows (as another protocol's bytes would read).
  std::string kind = Frame(kDataFrame, 1, 0, "x");
  Set32(&kind, 0, 0x43485247);
  EXPECT_FALSE(PeekFrame(kind, 0).ok());
  Set32(&kind, 0, 0);
  EXPECT_FALSE(PeekFrame(kind, 0).ok());
  // At the caps: fine, waiting for the payload.
  Set32(&record, 12, static_cast<uint32_t>(kMaxRecordBytes));
  head = PeekFrame(record, 0);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_FALSE(head.value());
}

TEST(RingWire, UnknownFailureCodesReadAsAFailedPeer) {
  EXPECT_EQ(CodeOf(0), StatusCode::kPeerFailed);
  EXPECT_EQ(CodeOf(static_cast<uint32_t>(StatusCode::kInternal) + 1), StatusCode::kPeerFailed);
  EXPECT_EQ(CodeOf(0xffffffffu), StatusCode::kPeerFailed);
  EXPECT_EQ(CodeOf(static_cast<uint32_t>(StatusCode::kMismatch)), StatusCode::kMismatch);
}

}  // namespace
}  // namespace chorus::rendezvous::ring_wire
