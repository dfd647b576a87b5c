// The process's place in a launch. weft is always linked against Open MPI, but a process that no
// launcher started (mpirun, or srun, sets none of the variables below) is rank 0 of 1 and never
// initialises MPI, so `weft train` alone runs exactly as it would without this layer.
//
// Launched, world() initialises MPI on first use with MPI_THREAD_MULTIPLE (each ProcessGroup
// runs its MPI calls on a thread of its own, and groups may talk at the same time) and finalises
// it at exit. Rank and size are MPI_COMM_WORLD's; the launchers' variables only say whether there
// is a launch:
//   Open MPI's mpirun: OMPI_COMM_WORLD_SIZE; PMIx (srun --mpi=pmix): PMIX_RANK; PMI-1/2 (srun,
//   MPICH's hydra): PMI_SIZE.
#pragma once
#include <string>

namespace weft::dist {

struct World {
  int rank = 0;
  int size = 1;
  bool launched = false;  // started by a launcher: MPI is initialised
  int local_size = 1;     // the ranks on this host (MPI_COMM_TYPE_SHARED), which share its cores
};

// Throws weft::Error when a launch is seen but MPI cannot be initialised, or gives less than
// MPI_THREAD_MULTIPLE.
const World& world();

// Threads for each rank when the launch leaves them to weft (no OMP_NUM_THREADS): this process's
// cores divided among the ranks on its host, at least 1. Every rank taking every core, as OpenMP
// does by default, puts ranks x cores spinning threads on the cores: 4 ranks on 2 cores trained
// 48 times slower than with a thread each. 0 when not launched or alone on the host.
int threads_per_local_rank();

// Whether the environment names a launch (without initialising anything).
bool launched_by_mpi();

// Under a launch of several ranks, every rank names the command it runs ("weft train") and all
// compare: ranks running different commands (weft train beside weft bench comm, or beside weft
// version, which needs no MPI) would wait on each other's collectives, or on MPI_Init, for ever.
// Throws weft::Error naming the two on every rank when they differ; nothing when not launched.
void agree_on_command(const std::string& command);

// For a rank that is ending with an error in a launch of several. The others may be waiting for
// it in a collective (its data failed to load where theirs did not), and MPI_Finalize, at exit,
// would wait for them in turn until --comm-timeout. If the process has not exited `grace_seconds`
// after this call, it leaves with `status` without finalising, which makes the launcher end every
// rank. Ranks that all refuse together (the options check) finalise at once and exit as usual.
void exit_if_stuck_after_error(int status, int grace_seconds);

}  // namespace weft::dist
