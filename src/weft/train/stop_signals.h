// SIGTERM (a spot instance's preemption notice, a scheduler's cancel, mpirun passing its own on),
// SIGINT (Ctrl-C) and SIGHUP (the terminal or ssh session gone; not under nohup, which asks to
// ignore it) during training ask the loop to stop after the step in flight and save a checkpoint
// that --resume continues exactly. A second signal, or one that arrives when no
// training loop is listening, has the signal's default action: the process ends.
//
// Why a thread of its own: oneDNN's generated f32 GEMM kernels (the avx2 and avx512 ones, before
// oneDNN 3.12) point the stack pointer into a heap buffer while they run. A signal handled on a
// thread inside such a kernel has its frame written there, over the allocator's bookkeeping: the
// heap is corrupted and the process dies later in free() or on a wild pointer (oneDNN issue
// #4845; seen here as ranks crashing inside dnnl_primitive_execute when mpirun passed SIGTERM on).
// So no thread that runs kernels may take these signals: they are blocked in every thread, and
// one thread takes them with sigwait().
#pragma once

#include <string>

namespace weft::train {

// Blocks SIGTERM, SIGINT and SIGHUP and starts the thread that waits for them. Threads inherit the mask
// they are created with, so this must run before any other thread starts (first thing in main,
// before MPI, oneDNN or OpenMP make theirs). Without it, StopOnSignal falls back to a handler,
// which is safe only in a process that runs no oneDNN GEMM while a signal may arrive.
void route_stop_signals_to_their_own_thread();

// Armed for its lifetime: the first of these signals is recorded instead of ending the process.
// One at a time (the training loop's).
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  // "SIGTERM", "SIGINT" or "SIGHUP" once one arrived, else "".
  std::string received() const;
};

}  // namespace weft::train
