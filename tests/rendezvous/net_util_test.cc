// Interface filters (NCCL_SOCKET_IFNAME syntax) and local address selection.
#include "rendezvous/net_util.h"

#include <gtest/gtest.h>

namespace chorus::rendezvous {
namespace {

// NOLINTNEXTLINE(cert-err58-cpp): a test table
const std::vector<NetInterface> kIfs = {{"lo", "127.0.0.1", true},
                                        {"docker0", "172.17.0.1", false},
                                        {"eth0", "10.0.0.5", false},
                                        {"eth10", "10.1.0.5", false},
                                        {"ib0", "192.168.0.5", false}};

std::string Pick(const std::string& filter) {
  Result<std::string> r = SelectFromInterfaces(filter, kIfs);
  EXPECT_TRUE(r.ok()) << filter << ": " << r.status().ToString();
  return r.ok() ? r.value() : "";
}

TEST(InterfaceFilter, Parse) {
  InterfaceFilter f = InterfaceFilter::Parse("eth0,ib").value();
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  EXPECT_EQ(f.names, (std::vector<std::string>{"eth0", "ib"}));
  f = InterfaceFilter::Parse("=eth0").value();
  EXPECT_TRUE(f.exact);
  f = InterfaceFilter::Parse("^docker,lo").value();
  EXPECT_TRUE(f.exclude);
  EXPECT_FALSE(f.exact);
  f = InterfaceFilter::Parse("^=eth0").value();
  EXPECT_TRUE(f.exclude && f.exact);
  for (const char* bad : {"", "^", "=", "^=", ",,"}) {
    Result<InterfaceFilter> r = InterfaceFilter::Parse(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "'";
  }
}

TEST(InterfaceFilter, Matching) {
  EXPECT_TRUE(InterfaceFilter::Parse("eth").value().Matches("eth10"));
  EXPECT_FALSE(InterfaceFilter::Parse("=eth1").value().Matches("eth10"));
  EXPECT_TRUE(InterfaceFilter::Parse("=eth1").value().Matches("eth1"));
  EXPECT_FALSE(InterfaceFilter::Parse("^docker,lo").value().Matches("docker0"));
  EXPECT_TRUE(InterfaceFilter::Parse("^docker,lo").value().Matches("eth0"));
}

TEST(SelectFromInterfaces, Filters) {
  EXPECT_EQ(Pick("eth"), "10.0.0.5");
  EXPECT_EQ(Pick("ib,eth"), "10.0.0.5");  // interface order, not filter order
  EXPECT_EQ(Pick("=eth10"), "10.1.0.5");
  EXPECT_EQ(Pick("ib"), "192.168.0.5");
  EXPECT_EQ(Pick("^docker,lo"), "10.0.0.5");
  EXPECT_EQ(Pick("^docker"), "10.0.0.5");  // loopback only as a last resort
  EXPECT_EQ(Pick("lo"), "127.0.0.1");
  EXPECT_EQ(Pick("^=eth0,docker0,lo"), "10.1.0.5");
}

TEST(SelectFromInterfaces, NoMatchNamesFilterAndInterfaces) {
  Result<std::string> r = SelectFromInterfaces("=eth1", kIfs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'=eth1'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("eth10=10.1.0.5"), std::string::npos) << r.status().message();
  r = SelectFromInterfaces("^e,d,i,l", kIfs);
  ASSERT_FALSE(r.ok());
  r = SelectFromInterfaces("eth", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("none"), std::string::npos);
}

TEST(LocalAddress, TowardLoopbackIsLoopback) {
  EXPECT_EQ(LocalAddressToward("127.0.0.1").value(), "127.0.0.1");
  EXPECT_EQ(LocalAddressToward("localhost").value().substr(0, 4), "127.");
  EXPECT_EQ(SelectInterfaceAddress("", "127.0.0.1").value(), "127.0.0.1");
  EXPECT_EQ(SelectInterfaceAddress("=lo", "unused").value(), "127.0.0.1");
  EXPECT_FALSE(LocalAddressToward("").ok());
  EXPECT_FALSE(LocalAddressToward("no-such-host.invalid").ok());
  Result<std::string> none = SelectInterfaceAddress("=no-such-if0", "127.0.0.1");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("lo=127.0.0.1"), std::string::npos) << none.status().message();
  // file:// has no master address: any address of this host.
  EXPECT_FALSE(SelectInterfaceAddress("", "").value().empty());
}

// Without a filter or a master address: the first non-loopback, else loopback.
TEST(DefaultHostAddress, FallsBackToLoopback) {
  EXPECT_EQ(DefaultHostAddress({{"lo", "127.0.0.1", true}, {"eth0", "10.0.0.2", false}}), "10.0.0.2");
  EXPECT_EQ(DefaultHostAddress({{"lo", "127.0.0.1", true}}), "127.0.0.1");
  EXPECT_EQ(DefaultHostAddress(std::vector<NetInterface>{}), "127.0.0.1");
}

TEST(LocalAddress, ListIncludesLoopback) {
  bool lo = false;
  for (const auto& i : ListInterfaces()) lo |= i.loopback && i.ip == "127.0.0.1";
  EXPECT_TRUE(lo);
}

// The store listens on MASTER_ADDR only where that is a numeric address of this host.
TEST(StoreBindAddress, OnlyALocalNumericMasterAddressNarrowsIt) {
  const std::vector<NetInterface> here = {{"lo", "127.0.0.1", true}, {"eth0", "10.0.0.2", false}};
  EXPECT_EQ(StoreBindAddress("127.0.0.1", here), "127.0.0.1");
  EXPECT_EQ(StoreBindAddress("127.0.1.1", here), "127.0.1.1");  // loopback, even if not listed
  EXPECT_EQ(StoreBindAddress("10.0.0.2", here), "10.0.0.2");
  EXPECT_EQ(StoreBindAddress("10.0.0.3", here), "");  // not ours: a NAT's, say
  EXPECT_EQ(StoreBindAddress("node1", here), "");     // a name may resolve otherwise elsewhere
  EXPECT_EQ(StoreBindAddress("::1", here), "");
}

}  // namespace
}  // namespace chorus::rendezvous
