/* Starting a process in a cgroup leaf (cgroup.h): clone3 with CLONE_INTO_CGROUP, or fork and a migration. */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__

#include "cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* From <linux/sched.h>, which not every C library's headers include (and which clashes with <sched.h> in some). */
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* The kernel's struct clone_args up to its `cgroup` field (CLONE_ARGS_SIZE_VER2): every field a 64-bit integer. */
struct clone3_args {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
_Static_assert(sizeof(struct clone3_args) == 88, "struct clone_args, version 2, is 88 bytes");

#ifdef SPAWNPOOL_TEST_FALLBACKS
bool use_clone3 = false;
#else
bool use_clone3 = true;
#endif

/* ---------------------------------------------------------------------------------------------------------- */
/* Starting a process in a leaf. */

/*
 * Where clone3 cannot start the child in the leaf (a kernel before 5.7, or a seccomp filter refusing clone3, as
 * container runtimes' did): fork, and the child moves itself by writing "0" to the leaf's cgroup.procs before it
 * returns. That is a migration, with its costs (the child's memory charged so far stays charged to the worker's
 * cgroup; the move takes the kernel's cgroup locks), but the child has not run the command yet, so nothing of the
 * command starts outside the leaf. The child tells the errno of its write through a pipe the worker waits on: a child
 * that could not move exits at once, unseen, and the fork fails with that errno.
 */
static pid_t fork_and_move(int dir) {
  int procs = openat(dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
  if (procs < 0) return -1;
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    int saved = errno;
    close(procs);
    errno = saved;
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(report[0]);
    int failed = write(procs, "0", 1) == 1 ? 0 : errno;
    close(procs);
    if (write(report[1], &failed, sizeof failed) < 0) failed = failed ? failed : EIO;
    close(report[1]);
    if (failed) _exit(127);
    return 0;
  }
  int saved = errno;
  close(procs);
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    errno = saved;
    return -1;
  }
  int failed = 0;
  ssize_t n;
  while ((n = read(report[0], &failed, sizeof failed)) < 0 && errno == EINTR) {}
  close(report[0]);
  if (n != (ssize_t)sizeof failed) failed = failed ? failed : EIO; /* it died before it could tell */
  if (failed) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    errno = failed;
    return -1;
  }
  return pid;
}

/*
 * fork(), but the child starts in the cgroup `dir`: clone3 with CLONE_INTO_CGROUP and no CLONE_VM, so the child gets
 * a copy of the worker's memory, as fork's. The system call itself, not the C library's fork: no atfork handlers, and
 * the child's C library state (its cached thread id) is the worker's, so the child must only make system calls until
 * it execs or _exits, as a vfork child does. ENOSYS (before 5.3, or a seccomp filter), E2BIG (5.3 to 5.6: no `cgroup`
 * field) and EPERM (older Docker's seccomp profile) make it fall back to fork_and_move for good.
 */
pid_t fork_into_dir(int dir) {
#ifdef SYS_clone3
  if (use_clone3) {
    struct clone3_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)dir;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0) return (pid_t)pid;
    if (errno != ENOSYS && errno != E2BIG && errno != EPERM) return -1;
    use_clone3 = false;
  }
#endif
  return fork_and_move(dir);
}

#endif
