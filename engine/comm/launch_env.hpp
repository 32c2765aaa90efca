// Rank discovery, local rank and device selection from the launcher's environment, and the verdict on the
// ranks' GPUs before a NCCL world (CPU code, no MPI, unit-tested).
//
// World rank and size, by launcher (the first family whose rank variable is set speaks for the launcher):
//   Open MPI mpirun/mpiexec                                      OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
//   MPICH / Intel MPI (Hydra)                                    PMI_RANK / PMI_SIZE
//   SLURM srun                                                   SLURM_PROCID / SLURM_STEP_NUM_TASKS
//   any PMIx launcher (prterun, srun --mpi=pmix)                 PMIX_RANK (PMIx exports no size variable)
// The SLURM pair counts only in a task srun started (SLURM_STEP_NUM_TASKS set): a batch script's own
// environment also holds SLURM_PROCID=0 and SLURM_NTASKS=<allocation>, where a plain `cleave` is a world of 1.
// After MPI_Init the claim is checked against MPI_COMM_WORLD (check_world_place): a mismatch means the
// processes did not join one MPI job, classically `srun` without `--mpi=pmix` on an Open MPI built with PMIx,
// which starts N singleton worlds of size 1 that would each train alone and overwrite each other's files.
// Under mpirun inside an sbatch allocation SLURM_PROCID/NTASKS belong to the batch step; the MPI launcher's
// own variables come first, so they are never compared.
//
// Which variable says "this process's index on its node", by launcher:
//   Open MPI mpirun/mpiexec (also Azure ML's "Mpi" distribution)  OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE
//   MPICH / Intel MPI (Hydra)                                    MPI_LOCALRANKID / MPI_LOCALNRANKS
//   SLURM srun (srun --mpi=pmix)                                 SLURM_LOCALID / SLURM_STEP_TASKS_PER_NODE
// They are read in that order: under `mpirun` inside an sbatch allocation SLURM_LOCALID belongs to the batch
// step and is the same (0) in every rank, so the MPI launcher's own variable must win. The SLURM pair counts only
// in a task srun started (SLURM_STEP_NUM_TASKS set), as for the world place: a batch script's own SLURM_LOCALID=0
// and SLURM_NTASKS_PER_NODE (set by --ntasks-per-node, a bound) describe no launch. The node's task count is its
// entry of SLURM_STEP_TASKS_PER_NODE ("4(x2)", "2,1"; by SLURM_NODEID when the nodes' counts differ), which srun
// sets in every task (SLURM_NTASKS_PER_NODE only with --ntasks-per-node). When no variable is
// set, or the values are inconsistent (two ranks on one host claim the same local rank), the local rank is
// the position of the rank among the ranks with the same host name (an allgather of host names, done by the
// MPI code that calls resolve_local_rank).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace cleave::comm {

// Looks a variable up; std::getenv by default, a map in tests.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;
EnvLookup process_env();

struct LocalRank {
  int local_rank = 0;
  int local_size = 1;     // ranks on this node, 0 when the launcher does not say
  std::string source;     // "OMPI_COMM_WORLD_LOCAL_RANK", "hostname", ...
};

// The launcher's claim, if any variable is set. Throws Error for a value that is not a non-negative integer,
// naming the variable.
std::optional<LocalRank> local_rank_from_env(const EnvLookup& env);

// What the launcher says about this process's place in the world.
struct WorldPlace {
  int rank = 0;
  int size = 0;           // 0 when the launcher exports no size (PMIx)
  std::string rank_var;   // "OMPI_COMM_WORLD_RANK", ...
  std::string size_var;   // "" when size is 0
};

// The launcher's world rank and size, from the first family above whose rank variable is set; nullopt when
// none is (a plain `cleave train`). Throws Error naming the variable for a value that is not a non-negative
// integer, or a rank not below the size.
std::optional<WorldPlace> world_place_from_env(const EnvLookup& env);

// Throws Error when `place` (the launcher's claim) disagrees with MPI's world rank or size, naming the
// variables, both pairs of numbers and the likely cause. Nothing to check when `place` is empty.
void check_world_place(const std::optional<WorldPlace>& place, int mpi_rank, int mpi_size);

// The local rank of `rank` given every rank's host name and every rank's launcher claim (-1 = none): the
// claim when every rank has one and the claims on each host are distinct, else the position among the ranks
// on the same host (ranks ordered by global rank).
LocalRank resolve_local_rank(std::span<const std::string> hostnames, std::span<const int> claimed, int rank,
                             std::string_view claim_source);

// The CUDA device of a rank that sees `visible_gpus` devices (>= 1): cuda:<local rank mod visible_gpus>, the one rule
// for the NCCL world's probe (select_device) and the trainer (train::rank_gpu). It covers each way a launcher
// hands GPUs out:
//   - every rank sees the node's GPUs (mpirun, torchrun) and the node has no more ranks than GPUs: cuda:<local
//     rank>, torchrun's torch.cuda.set_device(LOCAL_RANK);
//   - each rank sees only its own k GPUs (srun --gpus-per-task=k, CUDA_VISIBLE_DEVICES set per rank): one of its
//     own, as Megatron's rank % device_count picks (k = 1: cuda:0);
//   - more ranks than the GPUs each sees, all seeing the same ones: the ranks share them round robin, which the
//     staged MPI world allows and the NCCL probe refuses by PCI bus id (gpu_ownership names the ranks sharing).
// Pure: `visible_gpus` comes from the caller (cudaGetDeviceCount). Asserts visible_gpus >= 1 and local_rank >= 0.
int gpu_of_local_rank(int local_rank, int visible_gpus);

// The CUDA device of a rank by gpu_of_local_rank. Throws an Error naming the host and CUDA_VISIBLE_DEVICES when
// no device is visible.
int select_device(const LocalRank& local, int device_count, std::string_view hostname,
                  std::string_view visible_devices);

// One rank's GPU as the ranks compare them before a NCCL world is made (engine/comm/nccl/nccl_world.hpp): the
// host, and the PCI bus id of the device select_device picked (a physical GPU: two ranks that each see one GPU
// through their own CUDA_VISIBLE_DEVICES both pick cuda:0 and still hold different GPUs), or why it has none.
struct GpuRecord {
  std::string host;
  std::string gpu;    // PCI bus id; empty when `error` says why the rank has no GPU
  std::string error;
};

struct GpuOwnership {
  bool own = false;    // every rank has a GPU and no two ranks on one host hold the same one
  std::string detail;  // when not: the first rank without a GPU and why, or every rank sharing the first shared GPU
};

// The verdict over every rank's record (index = world rank). Pure: unit-tested without a GPU.
GpuOwnership gpu_ownership(std::span<const GpuRecord> records);

}  // namespace cleave::comm
