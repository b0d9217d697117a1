/*
 * Starting a planned child (struct child_plan, made by spawn.c): vfork + execve on Linux, posix_spawn elsewhere where
 * it can express the plan; the child's side between the two (exec_child: signals back to default, its session or
 * group, its stdio, cwd, ids, limits, subreaper) and how it reports a failed start.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <spawn.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
#define HAVE_ADDCHDIR 1
#else
#define HAVE_ADDCHDIR 0
#endif

#if defined(__linux__) && !defined(__sparc__) && !defined(__alpha__)
/*
 * Sets the signals the C library keeps for itself (glibc 32-33, musl 32-34; their sigaction refuses them) back to
 * default with the system call: a parent can leave them ignored (a Deno host's spawn does, through glibc's
 * posix_spawn), and the commands would start so. An all-zero kernel sigaction, in any architecture's layout, is
 * SIG_DFL with no flags and an empty mask; the last argument is the size of the kernel's sigset_t, (_NSIG - 1) / 8
 * bytes with the C libraries' _NSIG (8 on most architectures, 16 on MIPS). (SPARC and Alpha pass more arguments.)
 */
static void reset_libc_signals(void) {
  unsigned long zero[16] = {0};
  for (int sig = 32; sig <= 34; sig++) syscall(SYS_rt_sigaction, sig, zero, NULL, (size_t)((_NSIG - 1) / 8));
}
#else
static void reset_libc_signals(void) {}
#endif

/*
 * Whether vfork shares the worker's memory with its child, as it does on Linux and macOS, or copies it, as under
 * qemu-user and valgrind, which run vfork as fork: unknown until a child shows it. Until then, and for good if it
 * copies, the child also writes the errno of a failed start to a close-on-exec pipe the worker reads until the exec
 * closes it; otherwise a bad cwd, a refused uid or a script without "#!" would look like a command that exited 127.
 */
static enum { VFORK_UNKNOWN, VFORK_SHARES, VFORK_COPIES } vfork_memory = VFORK_UNKNOWN;

#ifdef SPAWNPOOL_TEST_FALLBACKS
/* The tests' stand-in for qemu-user and valgrind (the poll build: support/build_native.mjs). */
#define vfork fork
#endif

/* What the vfork child tells the worker: through shared memory where vfork shares it, else through `pipe_fd`. */
struct vfork_report {
  int ran;      /* set first thing by the child: seen by the worker only if the memory is shared */
  int failed;   /* the errno of a failed start */
  int pipe_fd;  /* the pipe's write end, or -1 */
  pid_t parent; /* the worker: the child's parent until the worker dies */
};

/*
 * The vfork child: it shares the worker's memory until its exec, so it only makes system calls, and records a failure
 * in `report` before it exits. Not inlined: its frame lies below vfork_exec's, so it cannot reuse a stack slot the
 * worker still needs once the vfork returns. The worker's signals are blocked (but the C library's own) until only
 * default dispositions are left: the ones this worker changed (changed_signals) are set back, and the C library's own;
 * all the others already are default, as no handler outlives an exec.
 */
__attribute__((noinline)) _Noreturn static void exec_child(const struct child_plan *plan,
                                                           volatile struct vfork_report *report) {
  report->ran = 1;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sigismember(&changed_signals, sig) == 1) sigaction(sig, &dfl, NULL);
  }
  reset_libc_signals();
  if (plan->tty >= 0) {
    /* A session of its own, whose controlling terminal is the command's terminal. */
    if (setsid() < 0 || ioctl(plan->tty, TIOCSCTTY, 0) < 0) goto fail;
  } else if (plan->detached ? setsid() < 0 : setpgid(0, 0) < 0) {
    goto fail;
  }
  int null_fd = -1;
  for (int fd = 0; fd < 3; fd++) {
    int from = plan->stdio_fd[fd];
    if (from == -2) continue;
    if (from == -1) {
      if (null_fd < 0) {
        /*
         * The slot is closed first, as posix_spawn's addopen does, so that a full fd table (the worker's pidfds) still
         * has room: /dev/null lands in the slot (the ones below it are set, the worker's own 0-2 above it), where its
         * close-on-exec is cleared; a later "null" slot gets a copy.
         */
        close(fd);
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0) goto fail;
      }
      from = null_fd;
    }
    if (from == fd ? fcntl(fd, F_SETFD, 0) < 0 : dup2(from, fd) < 0) goto fail;
  }
  if (plan->cwd != NULL && chdir(plan->cwd) < 0) goto fail;
  if (plan->set_gid || plan->set_uid) (void)setgroups(0, NULL);
  if (plan->set_gid && setgid(plan->gid) < 0) goto fail;
  if (plan->set_uid && setuid(plan->uid) < 0) goto fail;
  for (int i = 0; i < plan->limit_count; i++) {
    if (setrlimit(plan->limit_resource[i], &plan->limit[i]) < 0) goto fail;
  }
#ifdef __linux__
  /*
   * Killed by the kernel if the worker dies, as the host would kill it (SPAWNED_HOLD_DIES_WITH_WORKER_US). Set after the
   * ids, whose change clears it (as the exec of a set-user-ID program does: such a command is left to the host). A
   * worker that died before this is no longer the parent.
   */
  if (plan->dies_with_worker &&
      (prctl(PR_SET_PDEATHSIG, (unsigned long)SIGKILL, 0UL, 0UL, 0UL) < 0 || getppid() != report->parent)) {
    goto fail;
  }
  if (plan->subreaper && prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) < 0) goto fail;
#endif
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(plan->path, plan->argv, plan->envp);
fail:;
  int failed = errno ? errno : EINVAL;
  report->failed = failed;
  if (report->pipe_fd >= 0 && write(report->pipe_fd, &failed, sizeof failed) < 0) {
    /* nothing left to tell it by */
  }
  _exit(127);
}

/*
 * vfork + execve: every command on Linux, and elsewhere what posix_spawn cannot express (uid, gid; a cwd without
 * addchdir_np). That is a few sigaction calls in the child (exec_child) where glibc's posix_spawn makes one or two for
 * each of the 64 signals, while the worker waits for the exec.
 */
static pid_t vfork_exec(const struct child_plan *plan, int *err) {
  int report_pipe[2] = {-1, -1};
  /* A child started in a cgroup leaf is forked (cgroup_fork_into): it can only report through the pipe. */
  bool forked = plan->leaf >= 0;
  /* Without a pipe (EMFILE), a first child still shows whether memory is shared. */
  if ((forked || vfork_memory != VFORK_SHARES) && pipe2(report_pipe, O_CLOEXEC) != 0) {
    if (forked) {
      *err = errno;
      return -1;
    }
    report_pipe[0] = report_pipe[1] = -1;
  }
  volatile struct vfork_report report = {.ran = 0, .failed = 0, .pipe_fd = report_pipe[1], .parent = getpid()};
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old); /* no handler of the worker's may run in the child */
  pid_t pid = forked ? cgroup_fork_into(plan->leaf) : vfork();
  if (pid == 0) exec_child(plan, &report);
  int saved = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (report_pipe[1] >= 0) close(report_pipe[1]);
  int failed = report.failed;
  if (report_pipe[0] >= 0) {
    /* End of file once the exec closed the child's end (at once where memory is shared: the exec came first). */
    int reported;
    ssize_t n;
    while ((n = read(report_pipe[0], &reported, sizeof reported)) < 0 && errno == EINTR) {}
    if (n == (ssize_t)sizeof reported) failed = reported; /* only a child writes it */
    close(report_pipe[0]);
  }
  if (pid < 0) {
    *err = saved;
    return -1;
  }
  if (vfork_memory == VFORK_UNKNOWN && !forked) vfork_memory = report.ran ? VFORK_SHARES : VFORK_COPIES;
  if (failed) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    *err = failed;
    return -1;
  }
  return pid;
}

#ifdef __linux__
pid_t start_child(const struct child_plan *plan, int *err) {
  return vfork_exec(plan, err);
}
#else
static pid_t posix_spawn_plan(const struct child_plan *plan, int *err) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (plan->detached) {
#ifdef POSIX_SPAWN_SETSID
    flags |= POSIX_SPAWN_SETSID;
#endif
  } else {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &changed_signals);
  for (int fd = 0; fd < 3; fd++) {
    if (plan->stdio_fd[fd] == -1) posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0);
    else if (plan->stdio_fd[fd] >= 0) posix_spawn_file_actions_adddup2(&actions, plan->stdio_fd[fd], fd);
  }
#if HAVE_ADDCHDIR
  if (plan->cwd != NULL) posix_spawn_file_actions_addchdir_np(&actions, plan->cwd);
#endif
  pid_t pid;
  int r = posix_spawn(&pid, plan->path, &actions, &attr, plan->argv, plan->envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (r != 0) {
    *err = r;
    return -1;
  }
  return pid;
}

/* posix_spawn where it can express the plan, vfork_exec where it cannot. */
pid_t start_child(const struct child_plan *plan, int *err) {
  bool needs_vfork = plan->set_uid || plan->set_gid || plan->limit_count > 0 || plan->leaf >= 0 || plan->tty >= 0 ||
                     (!HAVE_ADDCHDIR && plan->cwd != NULL);
#ifndef POSIX_SPAWN_SETSID
  needs_vfork = needs_vfork || plan->detached;
#endif
  return needs_vfork ? vfork_exec(plan, err) : posix_spawn_plan(plan, err);
}
#endif
