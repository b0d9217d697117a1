/*
 * Signals: SIGTERM and SIGHUP stop the worker; SIGINT is passed on to the commands; SIGCHLD (always handled, where
 * pidfds work too) has the commands without a pidfd checked. Handlers only write the signal's number to a pipe the
 * loop reads.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#ifdef SYS_pidfd_open
bool use_pidfd;
#endif
static int signal_pipe[2] = {-1, -1};
struct watch signal_watch = {-1, W_SIGNALS, 0, 0, NULL};
sigset_t changed_signals; /* what commands get back to default: whatever this worker ignores or handles */

static void on_signal(int sig) {
  int saved = errno;
  uint8_t byte = (uint8_t)sig;
  (void)!write(signal_pipe[1], &byte, 1);
  errno = saved;
}

/*
 * A terminal's Ctrl-C reaches the whole foreground process group: the host, its workers (which share the host's
 * group) and, with the runtime's own spawn, the host's commands. Each command here leads a group of its own, so the
 * worker passes the SIGINT on to those groups and serves on: commands end as they would have (or handle it), and a host
 * that handles SIGINT can still drain its pool; a host that does not dies of it, and its workers then see their channel
 * close. Not to detached commands nor those on a terminal of their own: neither is in the foreground group.
 */
static void interrupt_commands(void) {
  for (struct job *job = live; job != NULL; job = job->next) {
    if (!job->done && !job->detached && !job->terminal) kill_child(job, SIGINT, KILL_GROUP);
  }
}

void read_signals(void) {
  uint8_t bytes[64];
  ssize_t n;
  bool child = false;
  while ((n = read(signal_watch.fd, bytes, sizeof bytes)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (bytes[i] == SIGCHLD) child = true;
      else if (bytes[i] == SIGINT) interrupt_commands();
      else stop(0);
    }
  }
  if (!child) return;
  reap_adopted();
  /* The commands without a pidfd watched: all of them in a poll build, or those pidfd_open failed for. */
  for (struct job *job = live, *next; job != NULL; job = next) {
    next = job->next;
    if (job->w_exit.fd < 0) check_exit(job);
  }
}

/* Adds to changed_signals every signal this worker ignores (SIGPIPE, and what its parent left ignored). */
static void add_ignored_signals(void) {
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction sa;
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) != 0) continue;
    if (sa.sa_handler == SIG_IGN) sigaddset(&changed_signals, sig);
  }
}

static void install_handler(int sig) {
  sigaddset(&changed_signals, sig);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
  sigfillset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

/*
 * Ignores SIGPIPE, records what commands get back to default (changed_signals), and handles SIGTERM, SIGINT, SIGHUP
 * and SIGCHLD through the signal pipe (and sees whether pidfds work); false when that pipe cannot be made.
 */
bool signals_init(void) {
  signal(SIGPIPE, SIG_IGN);
  sigemptyset(&changed_signals);
  add_ignored_signals();
  if (pipe(signal_pipe) != 0) return false;
  for (int i = 0; i < 2; i++) {
    fcntl(signal_pipe[i], F_SETFD, FD_CLOEXEC);
    set_nonblocking(signal_pipe[i]);
  }
  signal_watch.fd = signal_pipe[0];
  install_handler(SIGTERM);
  install_handler(SIGINT);
  install_handler(SIGHUP);
#ifdef SYS_pidfd_open
  int probe = (int)syscall(SYS_pidfd_open, getpid(), 0);
  use_pidfd = probe >= 0;
  if (probe >= 0) close(probe);
#endif
  install_handler(SIGCHLD); /* also where pidfds work: pidfd_open can fail (EMFILE) */
  return true;
}
