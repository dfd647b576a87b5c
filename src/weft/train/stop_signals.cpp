#include "weft/train/stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "weft/core/error.h"
#include "weft/monitor/status_file.h"

namespace weft::train {

namespace {

std::atomic<bool> routed{false};  // the waiting thread runs
std::atomic<bool> armed{false};   // a StopOnSignal is alive
volatile std::sig_atomic_t stop_signal = 0;

// SIGHUP unless the process was started ignoring it (nohup): blocked, an ignored signal would
// still be queued for sigwait, and a run the user meant to outlive the terminal would stop.
bool hangups_ignored() {
  struct sigaction current {};
  return sigaction(SIGHUP, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (!hangups_ignored()) sigaddset(&set, SIGHUP);
  return set;
}

// The signal's default action, taken on this thread: unblocked here alone, it is delivered here.
[[noreturn]] void end_as_the_signal_would(int signal) {
  monitor::remove_published_status();  // the exit skips the destructors that would remove it
  std::signal(signal, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(signal);
  std::_Exit(128 + signal);  // not reached: SIGTERM, SIGINT and SIGHUP end the process by default
}

void wait_for_stop_signals(sigset_t set) {
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    if (armed && stop_signal == 0) {
      stop_signal = signal;
    } else {
      end_as_the_signal_would(signal);
    }
  }
}

// Without the waiting thread: recorded by a handler, the second one ending the process
// (SA_RESETHAND); interrupted system calls restart (SA_RESTART), so reads and writes are not cut.
extern "C" void record_stop_signal(int signal) { stop_signal = signal; }

struct PreviousHandlers {
  struct sigaction term {}, interrupt {}, hangup {};
  bool hangup_taken = false;
} previous;

}  // namespace

void route_stop_signals_to_their_own_thread() {
  if (routed.exchange(true)) return;
  const sigset_t set = stop_signals();
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw Error("cannot block SIGTERM, SIGINT and SIGHUP");
  std::thread(wait_for_stop_signals, set).detach();
}

StopOnSignal::StopOnSignal() {
  stop_signal = 0;
  armed = true;
  if (routed) return;
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGTERM, &action, &previous.term);
  sigaction(SIGINT, &action, &previous.interrupt);
  previous.hangup_taken = !hangups_ignored();
  if (previous.hangup_taken) sigaction(SIGHUP, &action, &previous.hangup);
}

StopOnSignal::~StopOnSignal() {
  armed = false;
  if (routed) return;
  sigaction(SIGTERM, &previous.term, nullptr);
  sigaction(SIGINT, &previous.interrupt, nullptr);
  if (previous.hangup_taken) sigaction(SIGHUP, &previous.hangup, nullptr);
}

std::string StopOnSignal::received() const {
  switch (stop_signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "";
  }
}

}  // namespace weft::train
