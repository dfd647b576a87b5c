#include "weft/dist/world.h"

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "weft/core/error.h"

namespace weft::dist {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

namespace {

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

World start() {
  World w;
  if (!launched_by_mpi()) return w;
  int provided = 0;
  WEFT_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS, Error,
             "MPI_Init_thread failed: this process was started by an MPI launcher (mpirun or srun), but MPI could "
             "not start");
  std::atexit(finalize_mpi);
  WEFT_CHECK(provided >= MPI_THREAD_MULTIPLE, Error, "this MPI library gives thread level ", provided,
             ", but weft's process groups need MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
  // Errors come back as return codes, which weft turns into exceptions naming the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  MPI_Comm host;
  WEFT_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &host) == MPI_SUCCESS,
             Error, "MPI_Comm_split_type failed: cannot tell which ranks share this host");
  MPI_Comm_size(host, &w.local_size);
  MPI_Comm_free(&host);
  w.launched = true;
  return w;
}

}  // namespace

const World& world() {
  static const World w = start();
  return w;
}

void agree_on_command(const std::string& command) {
  if (!launched_by_mpi()) return;
  const World& w = world();
  if (w.size < 2) return;
  constexpr size_t kLength = 128;  // a command's path, cut there
  std::string mine = command.substr(0, kLength - 1);
  mine.resize(kLength, '\0');
  std::string all(kLength * static_cast<size_t>(w.size), '\0');
  WEFT_CHECK(MPI_Allgather(mine.data(), kLength, MPI_CHAR, all.data(), kLength, MPI_CHAR, MPI_COMM_WORLD) == MPI_SUCCESS,
             Error, "MPI_Allgather of the ranks' commands failed");
  const auto name = [&](int rank) { return std::string(all.c_str() + kLength * static_cast<size_t>(rank)); };
  for (int rank = 1; rank < w.size; ++rank)
    WEFT_CHECK(name(rank) == name(0), Error, "ranks run different commands: '", name(0), "' on rank 0, '", name(rank),
               "' on rank ", rank, "; every rank of a launch runs the same weft command");
}

void exit_if_stuck_after_error(int status, int grace_seconds) {
  if (!launched_by_mpi()) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || world().size < 2) return;
  std::thread([status, grace_seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(grace_seconds));
    std::fflush(nullptr);
    std::_Exit(status);
  }).detach();
}

int threads_per_local_rank() {
  const World& w = world();
  if (!w.launched || w.local_size == 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return 0;
  return std::max(1, omp_get_num_procs() / w.local_size);
}

}  // namespace weft::dist
