// Pure encode/decode of the store protocol: round trips and every malformed case.
#include "rendezvous/store_protocol.h"

#include <gtest/gtest.h>

namespace chorus::rendezvous {
namespace {

std::string Le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

StoreRequest RoundTrip(const StoreRequest& req) {
  std::string frame = EncodeRequest(req);
  FrameParse fp = ParseFrame(frame);
  EXPECT_EQ(fp.state, FrameState::kComplete);
  EXPECT_EQ(fp.frame.total_bytes, frame.size());
  Result<StoreRequest> back = DecodeRequest(fp.frame.opcode, fp.frame.payload);
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return back.value();
}

TEST(StoreProtocol, FrameHeaderIsLittleEndianLengthVersionOpcode) {
  std::string frame = EncodeFrame(7, "abc");
  ASSERT_EQ(frame.size(), 9u);
  EXPECT_EQ(frame.substr(0, 4), Le32(5));
  EXPECT_EQ(frame[4], kStoreProtocolVersion);
  EXPECT_EQ(frame[5], 7);
  EXPECT_EQ(frame.substr(6), "abc");
}

TEST(StoreProtocol, RequestsRoundTrip) {
  StoreRequest set{StoreOp::kSet, {"k"}, std::string("v\0x", 3), "", 0};
  StoreRequest back = RoundTrip(set);
  EXPECT_EQ(back.op, StoreOp::kSet);
  EXPECT_EQ(back.keys, std::vector<std::string>{"k"});
  EXPECT_EQ(back.value, std::string("v\0x", 3));

  back = RoundTrip({StoreOp::kGet, {"key"}, "", "", 1234});
  EXPECT_EQ(back.keys[0], "key");
  EXPECT_EQ(back.number, 1234);

  back = RoundTrip({StoreOp::kWait, {"a", "", "c"}, "", "", 5});
  EXPECT_EQ(back.keys, (std::vector<std::string>{"a", "", "c"}));
  EXPECT_EQ(back.number, 5);

  back = RoundTrip({StoreOp::kMultiGet, {"x", "y"}, "", "", 7});
  EXPECT_EQ(back.keys, (std::vector<std::string>{"x", "y"}));

  back = RoundTrip({StoreOp::kAdd, {"n"}, "", "", -42});
  EXPECT_EQ(back.number, -42);
  back = RoundTrip({StoreOp::kAdd, {"n"}, "", "", INT64_MIN});
  EXPECT_EQ(back.number, INT64_MIN);

  back = RoundTrip({StoreOp::kCompareSet, {"c"}, "desired", "expected", 0});
  EXPECT_EQ(back.expected, "expected");
  EXPECT_EQ(back.value, "desired");

  back = RoundTrip({StoreOp::kDelete, {"d"}, "", "", 0});
  EXPECT_EQ(back.keys[0], "d");
  back = RoundTrip({StoreOp::kCheck, {"p", "q"}, "", "", 0});
  EXPECT_EQ(back.keys.size(), 2u);
  back = RoundTrip({StoreOp::kPing, {}, "", "", 0});
  EXPECT_EQ(back.op, StoreOp::kPing);
}

TEST(StoreProtocol, RepliesRoundTrip) {
  auto rt = [](StoreOp op, const StoreReply& r) {
    std::string frame = EncodeReply(op, r);
    FrameParse fp = ParseFrame(frame);
    EXPECT_EQ(fp.state, FrameState::kComplete);
    Result<StoreReply> back = DecodeReply(op, fp.frame.opcode, fp.frame.payload);
    EXPECT_TRUE(back.ok()) << back.status().ToString();
    return back.value();
  };
  StoreReply get;
  get.values = {"value"};
  EXPECT_EQ(rt(StoreOp::kGet, get).values, std::vector<std::string>{"value"});
  StoreReply mg;
  mg.values = {"a", "bb", ""};
  EXPECT_EQ(rt(StoreOp::kMultiGet, mg).values, mg.values);
  StoreReply add;
  add.number = 99;
  EXPECT_EQ(rt(StoreOp::kAdd, add).number, 99);
  StoreReply flag;
  flag.number = 1;
  EXPECT_EQ(rt(StoreOp::kCheck, flag).number, 1);
  EXPECT_EQ(rt(StoreOp::kDelete, StoreReply()).number, 0);
  StoreReply timeout;
  timeout.code = ReplyCode::kTimeout;
  timeout.message = "key 'x' was not set";
  StoreReply t = rt(StoreOp::kWait, timeout);
  EXPECT_EQ(t.code, ReplyCode::kTimeout);
  EXPECT_EQ(t.message, "key 'x' was not set");
}

TEST(StoreProtocol, ErrorReplyDecodesWhateverTheOpcode) {
  std::string frame = EncodeErrorReply(200, "unknown opcode 200");
  FrameParse fp = ParseFrame(frame);
  ASSERT_EQ(fp.state, FrameState::kComplete);
  Result<StoreReply> r = DecodeReply(StoreOp::kGet, fp.frame.opcode, fp.frame.payload);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().code, ReplyCode::kError);
  EXPECT_EQ(r.value().message, "unknown opcode 200");
}

TEST(StoreProtocol, IncompleteFramesNeedMoreBytes) {
  std::string frame = EncodeRequest({StoreOp::kSet, {"key"}, "value", "", 0});
  for (size_t n = 0; n < frame.size(); ++n) {
    EXPECT_EQ(ParseFrame(std::string_view(frame).substr(0, n)).state, FrameState::kIncomplete) << n;
  }
  // Two frames back to back: the first is found alone.
  std::string two = frame + EncodeRequest({StoreOp::kPing, {}, "", "", 0});
  FrameParse fp = ParseFrame(two);
  ASSERT_EQ(fp.state, FrameState::kComplete);
  EXPECT_EQ(fp.frame.total_bytes, frame.size());
}

TEST(StoreProtocol, OversizedLengthIsInvalidFromTheFirstFourBytes) {
  FrameParse fp = ParseFrame(Le32(kMaxStoreFrameBytes + 1));
  EXPECT_EQ(fp.state, FrameState::kInvalid);
  EXPECT_NE(fp.error.message().find("64 MiB"), std::string::npos) << fp.error.message();
  EXPECT_EQ(ParseFrame(Le32(0xffffffffu)).state, FrameState::kInvalid);
  // Exactly the limit is allowed (just incomplete here).
  EXPECT_EQ(ParseFrame(Le32(kMaxStoreFrameBytes) + "\x02").state, FrameState::kIncomplete);
  // Before authentication the limit is the proof's size.
  fp = ParseFrame(Le32(kAuthProofFrameBytes - 3), kAuthProofFrameBytes - 4);
  EXPECT_EQ(fp.state, FrameState::kInvalid);
  EXPECT_NE(fp.error.message().find("before authentication"), std::string::npos) << fp.error.message();
}

TEST(StoreProtocol, AuthFramesRoundTripAtTheirFixedSizes) {
  AuthChallenge c;
  c.secret = true;
  c.server_nonce.fill(7);
  const std::string cf = EncodeAuthChallenge(c);
  ASSERT_EQ(cf.size(), kAuthChallengeFrameBytes);
  FrameParse fp = ParseFrame(cf);
  ASSERT_EQ(fp.state, FrameState::kComplete);
  Result<AuthChallenge> c2 = DecodeAuthChallenge(fp.frame.opcode, fp.frame.payload);
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  EXPECT_TRUE(c2->secret);
  EXPECT_EQ(c2->server_nonce, c.server_nonce);

  AuthProof p;
  p.has_secret = true;
  p.client_nonce.fill(3);
  p.mac = StoreClientMac(JobSecret("k"), c.server_nonce, p.client_nonce);
  const std::string pf = EncodeAuthProof(p);
  ASSERT_EQ(pf.size(), kAuthProofFrameBytes);
  fp = ParseFrame(pf);
  Result<AuthProof> p2 = DecodeAuthProof(fp.frame.opcode, fp.frame.payload);
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  EXPECT_EQ(p2->mac, p.mac);
  EXPECT_NE(StoreServerMac(JobSecret("k"), c.server_nonce, p.client_nonce), p.mac);  // the labels differ

  const std::string af = EncodeAuthAccepted(p.mac);
  ASSERT_EQ(af.size(), kAuthAnswerFrameBytes);
  fp = ParseFrame(af);
  Result<Sha256Digest> a = DecodeAuthAnswer(fp.frame.opcode, fp.frame.payload);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a.value(), p.mac);
  // A refusal decodes as kMismatch carrying the server's words.
  const std::string refusal = EncodeErrorReply(kAuthProofOpcode, "no");
  fp = ParseFrame(refusal);
  a = DecodeAuthAnswer(fp.frame.opcode, fp.frame.payload);
  EXPECT_EQ(a.status().code(), StatusCode::kMismatch);
  EXPECT_EQ(a.status().message(), "no");
  // A request in place of the proof.
  const std::string ping = EncodeRequest(StoreRequest{});
  fp = ParseFrame(ping);
  EXPECT_FALSE(DecodeAuthProof(fp.frame.opcode, fp.frame.payload).ok());
}

TEST(StoreProtocol, TooShortLengthAndBadVersionAreInvalid) {
  EXPECT_EQ(ParseFrame(Le32(0)).state, FrameState::kInvalid);
  EXPECT_EQ(ParseFrame(Le32(1) + "\x02").state, FrameState::kInvalid);
  FrameParse fp = ParseFrame(Le32(2) + std::string("\x01\x08", 2));
  EXPECT_EQ(fp.state, FrameState::kInvalid);
  EXPECT_NE(fp.error.message().find("version 1"), std::string::npos) << fp.error.message();
  EXPECT_EQ(fp.opcode, 8);
}

TEST(StoreProtocol, UnknownOpcodeIsAnError) {
  for (int op : {0, 10, 255}) {
    Result<StoreRequest> r = DecodeRequest(static_cast<uint8_t>(op), "");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kProtocolError);
    EXPECT_NE(r.status().message().find("unknown opcode " + std::to_string(op)), std::string::npos);
  }
}

TEST(StoreProtocol, GarbagePayloadsAreErrorsNeverCrashes) {
  // Truncations of every valid request payload, trailing bytes, and lying counts.
  std::vector<StoreRequest> reqs = {{StoreOp::kSet, {"key"}, "value", "", 0},   {StoreOp::kGet, {"key"}, "", "", 10},
                                    {StoreOp::kWait, {"a", "b"}, "", "", 10},   {StoreOp::kAdd, {"n"}, "", "", 1},
                                    {StoreOp::kCompareSet, {"c"}, "d", "e", 0}, {StoreOp::kDelete, {"k"}, "", "", 0},
                                    {StoreOp::kCheck, {"k"}, "", "", 0},        {StoreOp::kMultiGet, {"k"}, "", "", 1}};
  for (const auto& req : reqs) {
    std::string payload = EncodeRequest(req).substr(kStoreFrameHeaderBytes);
    uint8_t op = static_cast<uint8_t>(req.op);
    for (size_t n = 0; n < payload.size(); ++n) {
      EXPECT_FALSE(DecodeRequest(op, payload.substr(0, n)).ok()) << StoreOpName(req.op) << " cut at " << n;
    }
    Result<StoreRequest> trailing = DecodeRequest(op, payload + "x");
    ASSERT_FALSE(trailing.ok());
    EXPECT_NE(trailing.status().message().find("trailing"), std::string::npos);
  }
  // A key count of 2^32-1 with 4 bytes of payload: rejected, no huge allocation.
  EXPECT_FALSE(DecodeRequest(static_cast<uint8_t>(StoreOp::kCheck), Le32(0xffffffffu)).ok());
  // A string length beyond the payload.
  EXPECT_FALSE(DecodeRequest(static_cast<uint8_t>(StoreOp::kDelete), Le32(1000) + "abc").ok());
  EXPECT_FALSE(DecodeRequest(static_cast<uint8_t>(StoreOp::kPing), "x").ok());
  // Pseudo-random garbage for every opcode.
  uint32_t seed = 12345;
  for (int i = 0; i < 2000; ++i) {
    std::string junk;
    size_t len = (seed = seed * 1103515245 + 12345) % 40;
    for (size_t j = 0; j < len; ++j) junk.push_back(static_cast<char>((seed = seed * 1103515245 + 12345) >> 16));
    for (int op = 0; op < 12; ++op) {
      (void)DecodeRequest(static_cast<uint8_t>(op), junk).ok();
      if (op >= 1 && op <= 9) (void)DecodeReply(static_cast<StoreOp>(op), static_cast<uint8_t>(op), junk).ok();
    }
    (void)ParseFrame(junk);
  }
}

TEST(StoreProtocol, MalformedRepliesAreErrors) {
  EXPECT_FALSE(DecodeReply(StoreOp::kGet, 2, "").ok());                            // no status byte
  EXPECT_FALSE(DecodeReply(StoreOp::kGet, 2, std::string("\x07", 1)).ok());        // bad status
  EXPECT_FALSE(DecodeReply(StoreOp::kAdd, 4, std::string("\x00\x01", 2)).ok());    // short int
  EXPECT_FALSE(DecodeReply(StoreOp::kCheck, 7, std::string("\x00\x05", 2)).ok());  // flag not 0/1
  StoreReply ok;
  ok.values = {"v"};
  std::string frame = EncodeReply(StoreOp::kGet, ok);
  FrameParse fp = ParseFrame(frame);
  // A reply for another op is refused.
  EXPECT_FALSE(DecodeReply(StoreOp::kSet, fp.frame.opcode, fp.frame.payload).ok());
}

}  // namespace
}  // namespace chorus::rendezvous
