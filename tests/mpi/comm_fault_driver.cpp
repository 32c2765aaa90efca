// Fault-test job (run by run_fault_test.sh under mpiexec): the ranks loop over a collective (or a ring of
// batch_p2p); in iteration 3 the victim rank posts its part and then SIGKILLs or SIGSTOPs itself. The
// surviving ranks' watchdog must end the whole job, non-zero, within the timeout plus a few seconds, naming
// the victim. Every rank writes its pid to $CLEAVE_FAULT_PIDDIR/rank<r>.pid so the script can check that no
// rank outlives the job.
//
// usage: comm_fault_driver <kill|stop|stop_p2p> <timeout_s> [victim=1]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/comm/mpi/mpi_runtime.hpp"

int main(int argc, char** argv) {
  using namespace cleave;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <kill|stop|stop_p2p> <timeout_s> [victim]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  try {
    comm::MpiRuntime runtime(&argc, &argv);
    const int victim = argc > 3 ? std::atoi(argv[3]) : 1;
    if (const char* dir = std::getenv("CLEAVE_FAULT_PIDDIR")) {
      const std::string path = std::string(dir) + "/rank" + std::to_string(runtime.world_rank()) + ".pid";
      if (FILE* f = std::fopen(path.c_str(), "w")) {
        std::fprintf(f, "%d\n", static_cast<int>(getpid()));
        std::fclose(f);
      }
    }
    comm::MpiOptions options;
    options.timeout_s = std::atof(argv[2]);
    auto world = runtime.world(options);
    const int n = world->size();
    const int r = world->rank();
    Tensor t = Tensor::empty({4096}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    Tensor in = Tensor::empty({4096}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    for (int step = 0; step < 6; ++step) {
      t.fill_(static_cast<float>(r + step));
      in.fill_(0.5f);
      comm::WorkPtr work =
          mode == "stop_p2p"
              ? world->batch_p2p({comm::P2POp::send(t, (r + 1) % n), comm::P2POp::recv(in, (r + n - 1) % n)})
              : world->all_reduce(t, comm::ReduceOp::kSum);
      if (step == 3 && r == victim) raise(mode == "kill" ? SIGKILL : SIGSTOP);
      work->wait();
    }
    std::fprintf(stderr, "[rank %d/%d] fault test: the job survived the fault\n", r, n);
    return 0;
  } catch (const std::exception& e) {
    comm::abort_job(e.what());
  }
}
