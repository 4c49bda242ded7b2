// identity_probe [--slurm] PID... : one JSON line per pid with its resolved identity (and, with
// --slurm, the job's scontrol metadata). Used by tests/integration/slurm_identity.sh; the
// identity library has no CLI surface until the lead wires it into a collector.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "collect/identity/identity_resolver.h"

int main(int argc, char** argv) {
  using namespace ithbat::collect::identity;
  bool slurm = false;
  IdentityResolver resolver;
  SlurmJobCache jobs;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--slurm") {
      slurm = true;
      continue;
    }
    nlohmann::json j;
    int pid = std::atoi(argv[i]);
    j["pid"] = pid;
    auto id = resolver.Resolve(pid);
    if (!id) {
      j["error"] = id.error().ToString();
      ++failures;
    } else {
      j["job"] = id->identity.job;
      j["rank"] = id->identity.rank;
      j["local_rank"] = id->identity.local_rank;
      j["world_size"] = id->identity.world_size;
      j["gpu_index"] = id->identity.gpu_index;
      j["gpu_uuid"] = id->identity.gpu_uuid;
      j["ns_pid"] = id->ns_pid;
      j["ppid"] = id->ppid;
      j["slurm_job"] = id->slurm_job;
      j["slurm_step"] = id->slurm_step;
      j["job_source"] = id->job_source;
      if (slurm && !id->slurm_job.empty()) {
        auto info = jobs.Get(id->slurm_job);
        if (info) {
          j["slurm"] = {{"name", info->name},           {"user", info->user},
                        {"partition", info->partition}, {"node_list", info->node_list},
                        {"num_nodes", info->num_nodes}, {"state", info->state}};
        } else {
          j["slurm_error"] = info.error().ToString();
        }
      }
    }
    std::printf("%s\n", j.dump().c_str());
  }
  return failures == 0 ? 0 : 1;
}
