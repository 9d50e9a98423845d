#include "tools/perf/gloo_store.h"

#include <gloo/common/error.h>

namespace chorus::perf {
namespace {

[[noreturn]] void Throw(const Status& st) { throw ::gloo::IoException(st.ToString()); }

}  // namespace

Result<std::unique_ptr<GlooStore>> GlooStore::Connect(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout) {
  Result<std::unique_ptr<rendezvous::StoreClient>> client =
      rendezvous::StoreClient::Connect(host, static_cast<uint16_t>(port), Deadline::After(timeout));
  if (!client.ok()) {
    return client.status().WithContext("gloo rendezvous (is rank 0 running and MASTER_ADDR/MASTER_PORT right?)");
  }
  return std::unique_ptr<GlooStore>(new GlooStore(std::move(client.value()), timeout));
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  Status st = client_->Set(key, std::string(data.begin(), data.end()));
  if (!st.ok()) Throw(st);
}

std::vector<char> GlooStore::get(const std::string& key) {
  Result<std::string> v = client_->Get(key, timeout_);
  if (!v.ok()) Throw(v.status().WithContext("did every rank start with the same WORLD_SIZE?"));
  return std::vector<char>(v.value().begin(), v.value().end());
}

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  Status st = client_->Wait(keys, timeout);
  if (!st.ok()) Throw(st);
}

}  // namespace chorus::perf
