// ResolveInit for every method and launcher, with missing and garbage values, and
// SLURM node list expansion.
#include "rendezvous/init_method.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "rendezvous/slurm_nodelist.h"

namespace chorus::rendezvous {
namespace {

using Env = std::map<std::string, std::string>;

InitSpec Ok(const std::string& method, int rank, int size, const Env& env) {
  Result<InitSpec> r = ResolveInit(method, rank, size, MapEnv(env));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : InitSpec();
}

std::string Err(const std::string& method, int rank, int size, const Env& env) {
  Result<InitSpec> r = ResolveInit(method, rank, size, MapEnv(env));
  EXPECT_FALSE(r.ok()) << "unexpectedly resolved " << method;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

#define EXPECT_CONTAINS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

TEST(ResolveInit, TorchrunEnv) {
  Env env = {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"}, {"RANK", "3"},
             {"WORLD_SIZE", "8"},         {"LOCAL_RANK", "1"},     {"LOCAL_WORLD_SIZE", "2"}};
  for (const char* m : {"", "env://"}) {
    InitSpec s = Ok(m, -1, -1, env);
    EXPECT_EQ(s.method, "env");
    EXPECT_EQ(s.master_addr, "10.1.2.3");
    EXPECT_EQ(s.master_port, 1234);
    EXPECT_EQ(s.rank, 3);
    EXPECT_EQ(s.world_size, 8);
    EXPECT_EQ(s.local_rank, 1);
    EXPECT_EQ(s.local_world_size, 2);
    EXPECT_EQ(s.source, "torchrun/env");
  }
}

TEST(ResolveInit, ArgumentsWinOverEnvironment) {
  InitSpec s = Ok("env://", 1, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}, {"RANK", "7"}, {"WORLD_SIZE", "9"}});
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.source, "arguments");
  EXPECT_EQ(s.local_rank, -1);  // unknown: derived later from host ids
}

TEST(ResolveInit, EnvMissingAndGarbageValues) {
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}}),
                  "RANK is not set and no launcher (torchrun, SLURM, Open MPI, PBS) was detected");
  EXPECT_CONTAINS(Err("env://", 0, -1, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}}), "WORLD_SIZE is not set");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"RANK", "0"}, {"WORLD_SIZE", "abc"}, {"MASTER_ADDR", "h"}}),
                  "WORLD_SIZE='abc' is not an integer");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"RANK", "x1"}, {"WORLD_SIZE", "2"}}), "RANK='x1' is not an integer");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"RANK", "1"}}), "RANK is set but WORLD_SIZE is not");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"WORLD_SIZE", "2"}}), "RANK is not");
  EXPECT_CONTAINS(
      Err("env://", -1, -1, {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
      "rank 4 is out of range for world size 4");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE");
  EXPECT_CONTAINS(Err("env://", 0, 2, {{"MASTER_PORT", "5"}}), "MASTER_ADDR is not set");
  EXPECT_CONTAINS(Err("env://", 0, 2, {{"MASTER_ADDR", "h"}}), "MASTER_PORT is not set");
  EXPECT_CONTAINS(Err("env://", 0, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "http"}}),
                  "MASTER_PORT='http' is not an integer");
  EXPECT_CONTAINS(Err("env://", 0, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}), "MASTER_PORT=70000");
  EXPECT_CONTAINS(Err("env://", 0, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}}), "MASTER_PORT=0");
  EXPECT_CONTAINS(Err("env://", 0, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"LOCAL_RANK", "z"}}),
                  "LOCAL_RANK='z'");
  EXPECT_CONTAINS(
      Err("env://", 0, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
      "local rank 2");
  EXPECT_CONTAINS(Err("env://", -2, 2, {}), "rank -2");
  EXPECT_CONTAINS(Err("env://", 0, 0, {}), "world_size 0");
  EXPECT_CONTAINS(Err("env://", 5, 2, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}), "rank 5");
}

TEST(ResolveInit, TcpUrls) {
  InitSpec s = Ok("tcp://10.0.0.1:23456", 0, 2, {});
  EXPECT_EQ(s.method, "tcp");
  EXPECT_EQ(s.master_addr, "10.0.0.1");
  EXPECT_EQ(s.master_port, 23456);
  s = Ok("tcp://node-01.cluster:80", 1, 2, {});
  EXPECT_EQ(s.master_addr, "node-01.cluster");
  s = Ok("tcp://[::1]:29500", 0, 1, {});
  EXPECT_EQ(s.master_addr, "::1");
  EXPECT_EQ(s.master_port, 29500);
  // Rank and size from the environment.
  s = Ok("tcp://h:1", -1, -1, {{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.source, "torchrun/env");

  EXPECT_CONTAINS(Err("tcp://host", 0, 1, {}), "no port");
  EXPECT_CONTAINS(Err("tcp://host:", 0, 1, {}), "bad port ''");
  EXPECT_CONTAINS(Err("tcp://host:99999", 0, 1, {}), "bad port '99999'");
  EXPECT_CONTAINS(Err("tcp://host:12ab", 0, 1, {}), "bad port '12ab'");
  EXPECT_CONTAINS(Err("tcp://:123", 0, 1, {}), "no host");
  EXPECT_CONTAINS(Err("tcp://::1:123", 0, 1, {}), "brackets");
  EXPECT_CONTAINS(Err("tcp://[::1:123", 0, 1, {}), "[ipv6]:port");
  EXPECT_CONTAINS(Err("tcp://h:1", -1, -1, {}), "RANK is not set");
}

TEST(ResolveInit, FileUrlsAndUnknownSchemes) {
  InitSpec s = Ok("file:///tmp/x/rdv", 0, 4, {});
  EXPECT_EQ(s.method, "file");
  EXPECT_EQ(s.file_path, "/tmp/x/rdv");
  EXPECT_TRUE(s.master_addr.empty());
  s = Ok("file:///shared/rdv", -1, -1, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.source, "SLURM");
  EXPECT_CONTAINS(Err("file://relative/path", 0, 1, {}), "absolute");
  EXPECT_CONTAINS(Err("file://", 0, 1, {}), "absolute");
  EXPECT_CONTAINS(Err("file:///tmp/dir/", 0, 1, {}), "absolute file path");
  EXPECT_CONTAINS(Err("http://x:1", 0, 1, {}), "not supported");
  EXPECT_CONTAINS(Err("env", 0, 1, {}), "not supported");
}

TEST(ResolveInit, Slurm) {
  Env env = {{"SLURM_PROCID", "5"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "1"},
             {"SLURM_NTASKS_PER_NODE", "4"},
             {"SLURM_JOB_NODELIST", "gpu[07-10],cpu1"}};
  InitSpec s = Ok("env://", -1, -1, env);
  EXPECT_EQ(s.source, "SLURM");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world_size, 8);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 4);
  EXPECT_EQ(s.master_addr, "gpu07");
  EXPECT_EQ(s.master_port, kDefaultMasterPort);

  // MASTER_ADDR/PORT override; SLURM_TASKS_PER_NODE with repetition, node 2 of "4(x2),3".
  env.erase("SLURM_NTASKS_PER_NODE");
  env["SLURM_TASKS_PER_NODE"] = "4(x2),3";
  env["SLURM_NODEID"] = "2";
  env["MASTER_ADDR"] = "login";
  env["MASTER_PORT"] = "4444";
  s = Ok("env://", -1, -1, env);
  EXPECT_EQ(s.local_world_size, 3);
  EXPECT_EQ(s.master_addr, "login");
  EXPECT_EQ(s.master_port, 4444);
  env["SLURM_NODEID"] = "1";
  EXPECT_EQ(Ok("env://", -1, -1, env).local_world_size, 4);

  // SLURM_NPROCS as the older name of SLURM_NTASKS.
  s = Ok("env://", -1, -1, {{"SLURM_PROCID", "0"}, {"SLURM_NPROCS", "2"}, {"SLURM_NODELIST", "n1"}});
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.master_addr, "n1");

  EXPECT_CONTAINS(Err("env://", -1, -1, {{"SLURM_PROCID", "0"}}), "SLURM_NPROCS is not set although SLURM");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"SLURM_PROCID", "a"}, {"SLURM_NTASKS", "2"}}), "SLURM_PROCID='a'");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), "MASTER_ADDR is not set");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}}),
                  "SLURM node list 'n[1-'");
  EXPECT_CONTAINS(
      Err("env://", -1, -1,
          {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "two"}, {"MASTER_ADDR", "h"}}),
      "SLURM_TASKS_PER_NODE='two'");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}}),
                  "rank 2 is out of range for world size 2 (from SLURM)");
}

TEST(ResolveInit, TorchrunVariablesWinOverSlurm) {
  // torchrun inside an srun allocation: RANK/WORLD_SIZE describe the real job.
  InitSpec s = Ok("env://", -1, -1,
                  {{"RANK", "3"},
                   {"WORLD_SIZE", "16"},
                   {"MASTER_ADDR", "m"},
                   {"MASTER_PORT", "1"},
                   {"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(s.source, "torchrun/env");
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 16);
}

TEST(ResolveInit, OpenMpi) {
  Env env = {{"OMPI_COMM_WORLD_RANK", "2"},
             {"OMPI_COMM_WORLD_SIZE", "4"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
             {"MASTER_ADDR", "head"}};
  InitSpec s = Ok("env://", -1, -1, env);
  EXPECT_EQ(s.source, "Open MPI");
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.local_rank, 0);
  EXPECT_EQ(s.local_world_size, 2);
  EXPECT_EQ(s.master_port, kDefaultMasterPort);
  env.erase("MASTER_ADDR");
  EXPECT_CONTAINS(Err("env://", -1, -1, env), "Open MPI does not say which host runs rank 0");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"OMPI_COMM_WORLD_RANK", "0"}}), "OMPI_COMM_WORLD_SIZE is not set");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "-3"}}),
                  "OMPI_COMM_WORLD_SIZE=-3");
  // The launcher's layout is kept when the arguments describe the same job.
  s = Ok("tcp://h:1", 2, 4,
         {{"OMPI_COMM_WORLD_RANK", "2"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(s.source, "arguments");
  EXPECT_EQ(s.local_world_size, 2);
}

TEST(ResolveInit, PbsAndPmi) {
  std::string nodefile = ::testing::TempDir() + "/pbs_nodefile";
  {
    std::ofstream out(nodefile);
    out << "cn042.cluster\ncn042.cluster\ncn043.cluster\n";
  }
  Env env = {{"PMI_RANK", "1"},          {"PMI_SIZE", "3"},        {"PBS_JOBID", "77.pbs"},
             {"PBS_NODEFILE", nodefile}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}};
  InitSpec s = Ok("env://", -1, -1, env);
  EXPECT_EQ(s.source, "PBS");
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.world_size, 3);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 2);
  EXPECT_EQ(s.master_addr, "cn042.cluster");
  EXPECT_EQ(s.master_port, kDefaultMasterPort);
  // Unreadable node file: MASTER_ADDR is required and the error says so.
  env["PBS_NODEFILE"] = "/nonexistent/chorus/nodefile";
  EXPECT_CONTAINS(Err("env://", -1, -1, env), "MASTER_ADDR is not set");
  // Hydra outside PBS.
  s = Ok("tcp://h:1", -1, -1, {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(s.source, "PMI");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"PMI_RANK", "0"}, {"PBS_JOBID", "1"}}), "PMI_SIZE is not set");
  EXPECT_CONTAINS(Err("env://", -1, -1, {{"PMI_RANK", "0"}, {"PMI_SIZE", "1.5"}}), "PMI_SIZE='1.5'");
  std::remove(nodefile.c_str());
}

TEST(SlurmNodelist, Forms) {
  auto expand = [](const std::string& s) {
    auto r = ExpandSlurmNodelist(s);
    EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
    return r.ok() ? r.value() : std::vector<std::string>();
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(expand("node1"), V{"node1"});
  EXPECT_EQ(expand("a,b,c"), (V{"a", "b", "c"}));
  EXPECT_EQ(expand("node[01-04,07],gpu3"), (V{"node01", "node02", "node03", "node04", "node07", "gpu3"}));
  EXPECT_EQ(expand("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand("rack[1-2]-n[1-2]"), (V{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(expand("x[3]"), V{"x3"});
  EXPECT_EQ(expand("a-[1-2].ib,b"), (V{"a-1.ib", "a-2.ib", "b"}));
  EXPECT_EQ(FirstSlurmHost("node[01-04,07],gpu3").value(), "node01");
  EXPECT_EQ(FirstSlurmHost("gpu3,node[1-2]").value(), "gpu3");
  EXPECT_EQ(FirstSlurmHost("n[5-999999999]").value(), "n5");  // not expanded in full
  EXPECT_EQ(FirstSlurmHost("r[2-3]-n[07,09]").value(), "r2-n07");
}

TEST(SlurmNodelist, Garbage) {
  for (const char* bad :
       {"", "n[1-", "n1-2]", "n[[1]]", "n[a-b]", "n[5-3]", "n[]", ",n1", "n[1-2", "[1-2]", "n[1--2]", "n[1,]",
        "n[1-99999999999999999999999]", "n[99999999999999999999]"}) {  // past 2^64: an error, not an exception
    auto r = ExpandSlurmNodelist(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' expanded";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  auto huge = ExpandSlurmNodelist("n[0-999999999]");
  ASSERT_FALSE(huge.ok());
  EXPECT_CONTAINS(huge.status().message(), "more than");
  EXPECT_FALSE(ExpandSlurmNodelist("a[1-1000]b[1-1000]c[1-1000]").ok());
  EXPECT_FALSE(FirstSlurmHost("n[").ok());
}

}  // namespace
}  // namespace chorus::rendezvous
